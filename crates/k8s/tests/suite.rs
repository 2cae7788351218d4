//! The manifests' tests, one binary: each file of this folder is a module of it, compiled and
//! linked once rather than once per file.

mod dashboard;
mod dockerfile;
mod inject;
mod render;
mod validate;
