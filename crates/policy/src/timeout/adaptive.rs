// PLACEHOLDER: being written; replace this whole file.
pub struct Adaptive;
pub struct AdaptiveConfig;
