//! The report's tests, one binary: each file of this folder is a module of it, compiled and
//! linked once rather than once per file.

mod browser;
mod common;
mod render;
