// PLACEHOLDER: being written; replace this whole file.
pub struct Bloc;
pub struct BlocConfig;
