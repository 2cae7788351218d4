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

/// A proxy started from the file `text`, which must be valid.
async fn proxy_of(text: &str) -> tailguard_proxy::Proxy {
    let config = tailguard_proxy::Config::parse(text, std::path::Path::new("proxy.yaml")).unwrap();
    tailguard_proxy::Proxy::start(config).await.unwrap()
}
