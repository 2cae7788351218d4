//! serve's tests over real sockets, one binary: each file of this folder is a module of it,
//! compiled and linked once rather than once per file (as 3 binaries they took 40 s of `make
//! test`'s build).

mod cancel;
mod common;
mod serve;
mod store;
