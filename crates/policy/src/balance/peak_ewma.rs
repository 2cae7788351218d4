// PLACEHOLDER: being written; replace this whole file.
pub struct PeakEwma;
pub struct PeakEwmaConfig;
