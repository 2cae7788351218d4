// PLACEHOLDER: being written; replace this whole file.
pub struct PercentileHedge;
pub struct PercentileHedgeConfig;
