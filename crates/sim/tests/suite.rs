//! The simulator's tests, one binary: each file of this folder is a module of it, compiled and
//! linked once rather than once per file (as 13 binaries they took 46 s of `make test`'s build).

mod balancing;
mod cancel;
mod common;
mod engine;
mod faults;
mod hedging;
mod mesh;
mod optimizer;
mod overload;
mod real;
mod reproduce;
mod routes;
mod timeouts;
mod traces;
