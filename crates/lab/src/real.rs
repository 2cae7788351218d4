//! Real programs as replicas (docs/lab.md, "Real services"): Debian's nginx, redis-server and
//! memcached started in place of `tailguard serve` for services of `kind: nginx|redis|memcached`,
//! each on its replica's address and [`SERVE_PORT`], its configuration generated from the
//! service's `config:` into the run directory, in the foreground so the lab stops it by its PID.
//!
//! nginx keeps its sidecar (HTTP callers reach it through their egress and its ingress as any
//! service; with a call it proxies every request to that callee through its own egress). redis and
//! memcached have none: callers connect to them directly over their protocol
//! (`tailguard_serve::store`), so the sidecar's policies do not apply to those edges.

use crate::error::LabError;
use crate::http;
use crate::plan::{self, Plan, Replica};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use tailguard_model::real::{MemcachedConfig, NginxConfig, RedisConfig};
use tailguard_model::{Kind, Program, Run};

const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// How the lab knows a process is ready.
#[derive(Clone, Copy, Debug)]
pub enum Probe {
    /// `GET /healthz` answers 200 (tailguard serve and proxy, nginx).
    Http(SocketAddr),
    /// `PING` answers `+PONG`.
    Redis(SocketAddr),
    /// `version` answers `VERSION ...`.
    Memcached(SocketAddr),
}

impl Probe {
    pub fn ready(self) -> bool {
        match self {
            Probe::Http(addr) => http::get(addr, "/healthz").is_ok_and(|(status, _)| status == 200),
            Probe::Redis(addr) => exchange(addr, b"PING\r\n").is_ok_and(|l| l == "+PONG"),
            Probe::Memcached(addr) => exchange(addr, b"version\r\n").is_ok_and(|l| l.starts_with("VERSION ")),
        }
    }

    /// What is asked, for errors.
    pub fn describe(self) -> String {
        match self {
            Probe::Http(addr) => format!("GET http://{addr}/healthz"),
            Probe::Redis(addr) => format!("redis PING at {addr}"),
            Probe::Memcached(addr) => format!("memcached version at {addr}"),
        }
    }
}

/// Sends `request`, returns the first reply line.
fn exchange(addr: SocketAddr, request: &[u8]) -> std::io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, PROBE_TIMEOUT)?;
    stream.set_read_timeout(Some(PROBE_TIMEOUT))?;
    stream.write_all(request)?;
    let mut line = String::new();
    BufReader::new(stream.take(1024)).read_line(&mut line)?;
    Ok(line.trim_end().to_string())
}

/// A real program to start for one replica.
pub struct Real {
    /// `nginx web-0`.
    pub name: String,
    pub command: Command,
    pub probe: Probe,
}

/// The real program of `replica`, or `None` for a synthetic service (`tailguard serve`). Writes
/// its configuration under `dir`.
pub fn program(run: &Run, replica: &Replica, dir: &Path) -> Result<Option<Real>, LabError> {
    let service = &run.services[&replica.service];
    let addr = replica.serve();
    let real = match service.program()? {
        Program::Synthetic => return Ok(None),
        Program::Nginx(config) => {
            let prefix = dir.join(format!("nginx-{}", replica.name()));
            let upstream = service.calls.first().map(|c| (replica.egress(), c.service.as_str()));
            write_nginx(&prefix, &config, addr, upstream)?;
            let mut c = Command::new(find("nginx")?);
            c.arg("-p").arg(&prefix).arg("-c").arg(prefix.join("nginx.conf")).args(["-e", "stderr"]);
            Real { name: format!("nginx {}", replica.name()), command: c, probe: Probe::Http(addr) }
        }
        Program::Redis(config) => {
            let mut c = Command::new(find("redis-server")?);
            c.args(redis_args(&config, addr)).arg("--dir").arg(dir);
            Real { name: format!("redis {}", replica.name()), command: c, probe: Probe::Redis(addr) }
        }
        Program::Memcached(config) => {
            let mut c = Command::new(find("memcached")?);
            c.args(memcached_args(&config, addr));
            Real { name: format!("memcached {}", replica.name()), command: c, probe: Probe::Memcached(addr) }
        }
    };
    Ok(Some(real))
}

/// Where `replica`'s `tailguard serve` sends its calls to `callee`: its sidecar's egress for a
/// callee that speaks HTTP, the callee's replicas themselves for a store.
pub fn downstream(run: &Run, plan: &Plan, replica: &Replica, callee: &str) -> String {
    let kind = run.services[callee].kind;
    if kind.speaks_http() {
        return format!("http://{}{}", replica.egress(), plan::route(callee));
    }
    let addrs: Vec<String> = plan.of(callee).map(|r| r.serve().to_string()).collect();
    format!("{}://{}", kind.name(), addrs.join(","))
}

/// Whether `kind`'s replicas have a sidecar (nginx does; redis and memcached speak no HTTP).
pub fn has_sidecar(kind: Kind) -> bool {
    kind.speaks_http()
}

/// The program's path: on `PATH`, or in /usr/sbin (where Debian puts nginx).
pub fn find(program: &str) -> Result<PathBuf, LabError> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|d| d.join(program))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            let package = if program == "redis-server" { "redis-server" } else { program };
            LabError::Network(format!(
                "{program} is not installed (not on PATH nor in /usr/sbin); install it (apt-get install {package}) to run `kind: {}` services",
                if program == "redis-server" { "redis" } else { program }
            ))
        })
}

/// nginx's files under `prefix`: nginx.conf, its temp directories, and the static answer.
fn write_nginx(
    prefix: &Path,
    config: &NginxConfig,
    listen: SocketAddr,
    upstream: Option<(SocketAddr, &str)>,
) -> Result<(), LabError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |error| LabError::Write { path, error }
    };
    for sub in ["html", "tmp"] {
        std::fs::create_dir_all(prefix.join(sub)).map_err(io(prefix))?;
    }
    let body = "x".repeat(config.body_bytes as usize);
    std::fs::write(prefix.join("html/index.html"), body).map_err(io(&prefix.join("html")))?;
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let conf = nginx_conf(config, listen, upstream, root);
    std::fs::write(prefix.join("nginx.conf"), conf).map_err(io(&prefix.join("nginx.conf")))
}

/// The nginx.conf of one replica: foreground, logs to stderr, every path under the prefix,
/// `/healthz` for the lab, and every other path the static body or a proxy to the callee.
fn nginx_conf(config: &NginxConfig, listen: SocketAddr, upstream: Option<(SocketAddr, &str)>, root: bool) -> String {
    let content = match upstream {
        Some((_, callee)) => format!(
            "location / {{ proxy_pass http://egress{route}; proxy_http_version 1.1; proxy_set_header Connection \"\"; }}",
            route = plan::route(callee)
        ),
        None => "location / { root html; try_files /index.html =404; }".to_string(),
    };
    let upstream_block = upstream
        .map(|(egress, _)| format!("    upstream egress {{ server {egress}; keepalive 64; }}\n"))
        .unwrap_or_default();
    format!(
        "# Generated by the tailguard lab from the service's `config:`.\n\
         daemon off;\nmaster_process on;\n{user}pid nginx.pid;\nerror_log stderr warn;\n\
         worker_processes {wp};\n\
         events {{ worker_connections {wc}; }}\n\
         http {{\n    access_log off;\n\
         \x20   client_body_temp_path tmp/body;\n    proxy_temp_path tmp/proxy;\n    fastcgi_temp_path tmp/fastcgi;\n\
         \x20   uwsgi_temp_path tmp/uwsgi;\n    scgi_temp_path tmp/scgi;\n\
         \x20   keepalive_timeout {kt}s;\n    keepalive_requests {kr};\n\
         {upstream_block}\
         \x20   server {{\n        listen {listen};\n\
         \x20       location = /healthz {{ return 200 \"ok\\n\"; }}\n        {content}\n    }}\n}}\n",
        user = if root { "user root;\n" } else { "" },
        wp = config.worker_processes,
        wc = config.worker_connections,
        kt = config.keepalive_timeout.get().as_secs(),
        kr = config.keepalive_requests,
    )
}

/// redis-server's arguments: the replica's address, no persistence, the service's parameters.
fn redis_args(config: &RedisConfig, addr: SocketAddr) -> Vec<String> {
    [
        ("bind", addr.ip().to_string()),
        ("port", addr.port().to_string()),
        ("daemonize", "no".into()),
        ("protected-mode", "no".into()),
        ("save", String::new()),
        ("appendonly", "no".into()),
        ("logfile", String::new()),
        ("hz", config.hz.to_string()),
        ("io-threads", config.io_threads.to_string()),
        ("maxmemory", format!("{}mb", config.maxmemory_mb)),
        ("maxmemory-policy", config.maxmemory_policy.clone()),
    ]
    .into_iter()
    .flat_map(|(key, value)| [format!("--{key}"), value])
    .collect()
}

/// memcached's arguments: the replica's address, no UDP, the service's parameters.
fn memcached_args(config: &MemcachedConfig, addr: SocketAddr) -> Vec<String> {
    let mut args = vec![
        "-l".to_string(),
        addr.ip().to_string(),
        "-p".to_string(),
        addr.port().to_string(),
        "-U".to_string(),
        "0".to_string(),
        "-t".to_string(),
        config.threads.to_string(),
        "-m".to_string(),
        config.memory_mb.to_string(),
        "-c".to_string(),
        config.connections.to_string(),
    ];
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        // memcached refuses to run as root unless told which user to be.
        args.extend(["-u".to_string(), "root".to_string()]);
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nginx_conf_carries_the_parameters_and_the_route() {
        let config = NginxConfig { worker_processes: 3, worker_connections: 512, ..NginxConfig::default() };
        let listen: SocketAddr = "127.9.1.1:8080".parse().unwrap();
        let conf = nginx_conf(&config, listen, Some(("127.9.1.1:4140".parse().unwrap(), "api")), false);
        for want in [
            "worker_processes 3;",
            "worker_connections 512;",
            "listen 127.9.1.1:8080;",
            "server 127.9.1.1:4140;",
            "proxy_pass http://egress/api/;",
            "keepalive_timeout 75s;",
        ] {
            assert!(conf.contains(want), "{want} not in:\n{conf}");
        }
        assert!(!conf.contains("user root"));
        let conf = nginx_conf(&config, listen, None, true);
        assert!(conf.contains("try_files /index.html") && conf.contains("user root;"), "{conf}");
    }

    #[test]
    fn redis_and_memcached_arguments_carry_the_parameters() {
        let addr: SocketAddr = "127.9.2.1:8080".parse().unwrap();
        let args = redis_args(&RedisConfig { hz: 50, io_threads: 2, ..RedisConfig::default() }, addr).join(" ");
        assert!(args.contains("--bind 127.9.2.1 --port 8080") && args.contains("--hz 50 --io-threads 2"), "{args}");
        assert!(args.contains("--save  --appendonly no"), "{args}");
        let args = memcached_args(&MemcachedConfig { threads: 2, memory_mb: 32, connections: 100 }, addr).join(" ");
        assert!(args.starts_with("-l 127.9.2.1 -p 8080 -U 0 -t 2 -m 32 -c 100"), "{args}");
    }
}
