// PLACEHOLDER: being written; replace this whole file.
pub struct Optimizer;
pub struct OptimizerConfig;
