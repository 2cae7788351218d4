// PLACEHOLDER: being written; replace this whole file.
pub struct Controller;
pub struct ControllerConfig;
