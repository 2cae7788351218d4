//! The proxy's tests over real sockets, one binary: each file of this folder is a module of it,
//! compiled and linked once rather than once per file (each file linked on its own cost `make
//! test` about a minute and a half on two cores). kubernetes.rs, the `kube` feature's, is a binary
//! of its own: it sets `KUBECONFIG` for its process.

mod cancel;
mod discovery;
mod fuzz;
mod grpc;
mod grpc_interop;
mod h2spec;
mod proxy;
mod replay;
mod routes;
mod shutdown;
mod tls;
mod trace;
mod upgrade;
