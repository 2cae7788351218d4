// PLACEHOLDER: being written; replace this whole file.
pub struct DynamicCapacity;
