//! The proxy's tests over real sockets, one binary: each file of this folder is a module of it,
//! compiled and linked once rather than once per file (as 14 binaries they took 229 s of the 1,354
//! s `make test`'s build spends compiling, by `cargo --timings`). kubernetes.rs, the `kube`
//! feature's, is a binary of its own: it sets `KUBECONFIG` for its process.

mod cancel;
mod discovery;
mod fuzz;
mod grpc;
mod grpc_interop;
mod h2load;
mod h2spec;
mod proxy;
mod replay;
mod routes;
mod shutdown;
mod tls;
mod trace;
mod upgrade;
