//! Real software as nodes of a topology: a service's `kind` (synthetic, nginx, redis, memcached)
//! and its `config:`, the program's own parameters, typed per kind. The lab runs these programs
//! (Debian's packages) in place of `tailguard serve`; the simulator cannot model them.

use crate::duration::Dur;
use crate::error::ModelError;
use indexmap::IndexMap;
use serde::de::DeserializeOwned;
use serde::Deserialize;

/// What runs as each replica of a service.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// `tailguard serve`: the file's service time, faults and calls (the simulator's model).
    #[default]
    Synthetic,
    /// nginx answering HTTP: a static body, or, with one call, a reverse proxy to the callee.
    Nginx,
    /// redis-server; callers send it GET (and SET on a miss) over RESP.
    Redis,
    /// memcached; callers send it get (and set on a miss) over its text protocol.
    Memcached,
}

impl Kind {
    /// The name as files write it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Synthetic => "synthetic",
            Kind::Nginx => "nginx",
            Kind::Redis => "redis",
            Kind::Memcached => "memcached",
        }
    }

    /// Whether callers reach it over HTTP through their sidecar (the others speak their own
    /// protocol, straight to the replicas).
    pub fn speaks_http(self) -> bool {
        matches!(self, Kind::Synthetic | Kind::Nginx)
    }
}

/// nginx's parameters (nginx.org/en/docs/ngx_core_module.html, ngx_http_core_module.html).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct NginxConfig {
    /// `worker_processes`.
    pub worker_processes: u32,
    /// `worker_connections` (per worker; nginx needs at least a few for its own listeners).
    pub worker_connections: u32,
    /// `keepalive_timeout` towards clients.
    pub keepalive_timeout: Dur,
    /// `keepalive_requests` per client connection.
    pub keepalive_requests: u32,
    /// Size of the static answer, in bytes (when nginx calls nothing).
    pub body_bytes: u32,
}

impl Default for NginxConfig {
    fn default() -> Self {
        NginxConfig {
            worker_processes: 1,
            worker_connections: 1024,
            keepalive_timeout: Dur::from(std::time::Duration::from_secs(75)),
            keepalive_requests: 1000,
            body_bytes: 1024,
        }
    }
}

/// redis-server's parameters (redis.conf); persistence is always off.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RedisConfig {
    /// `hz`: background task frequency, 1 to 500.
    pub hz: u32,
    /// `io-threads`, 1 to 128.
    pub io_threads: u32,
    /// `maxmemory` in MiB; 0 is no limit.
    pub maxmemory_mb: u32,
    /// `maxmemory-policy`.
    pub maxmemory_policy: String,
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig { hz: 10, io_threads: 1, maxmemory_mb: 0, maxmemory_policy: "noeviction".to_string() }
    }
}

/// The `maxmemory-policy` values redis 7 accepts.
pub const REDIS_POLICIES: [&str; 8] = [
    "noeviction",
    "allkeys-lru",
    "allkeys-lfu",
    "allkeys-random",
    "volatile-lru",
    "volatile-lfu",
    "volatile-random",
    "volatile-ttl",
];

/// memcached's parameters (memcached(1)).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MemcachedConfig {
    /// `-t`: worker threads.
    pub threads: u32,
    /// `-m`: item memory in MiB.
    pub memory_mb: u32,
    /// `-c`: the most simultaneous connections.
    pub connections: u32,
}

impl Default for MemcachedConfig {
    fn default() -> Self {
        MemcachedConfig { threads: 4, memory_mb: 64, connections: 1024 }
    }
}

/// A service's kind with its parameters, parsed and checked.
#[derive(Clone, Debug, PartialEq)]
pub enum Program {
    Synthetic,
    Nginx(NginxConfig),
    Redis(RedisConfig),
    Memcached(MemcachedConfig),
}

impl Program {
    /// Parses `config` for `kind`; errors name the key at fault (relative to the service).
    pub fn parse(kind: Kind, config: &IndexMap<String, serde_yaml_ng::Value>) -> Result<Program, ModelError> {
        let program = match kind {
            Kind::Synthetic if config.is_empty() => Program::Synthetic,
            Kind::Synthetic => {
                return Err(ModelError::at(
                    "config",
                    "a synthetic service takes no `config`; expected `kind: nginx`, `redis` or `memcached` with it",
                ))
            }
            Kind::Nginx => {
                let c: NginxConfig = typed(config, kind)?;
                at_least("config.worker_processes", c.worker_processes, 1, 64)?;
                at_least("config.worker_connections", c.worker_connections, 16, 65536)?;
                at_least("config.keepalive_requests", c.keepalive_requests, 1, u32::MAX)?;
                at_least("config.body_bytes", c.body_bytes, 0, 1 << 24)?;
                Program::Nginx(c)
            }
            Kind::Redis => {
                let c: RedisConfig = typed(config, kind)?;
                at_least("config.hz", c.hz, 1, 500)?;
                at_least("config.io_threads", c.io_threads, 1, 128)?;
                if !REDIS_POLICIES.contains(&c.maxmemory_policy.as_str()) {
                    return Err(ModelError::at(
                        "config.maxmemory_policy",
                        format!("expected one of: {}, got {:?}", REDIS_POLICIES.join(", "), c.maxmemory_policy),
                    ));
                }
                Program::Redis(c)
            }
            Kind::Memcached => {
                let c: MemcachedConfig = typed(config, kind)?;
                at_least("config.threads", c.threads, 1, 256)?;
                at_least("config.memory_mb", c.memory_mb, 1, 1 << 20)?;
                at_least("config.connections", c.connections, 10, 1 << 20)?;
                Program::Memcached(c)
            }
        };
        Ok(program)
    }
}

/// `config` as the kind's type: unknown keys and wrong types are errors naming the key.
fn typed<T: DeserializeOwned>(config: &IndexMap<String, serde_yaml_ng::Value>, kind: Kind) -> Result<T, ModelError> {
    let value = serde_yaml_ng::to_value(config).map_err(|e| ModelError::at("config", e.to_string()))?;
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let at = if path == "." || path.is_empty() { "config".to_string() } else { format!("config.{path}") };
        ModelError::at(at, format!("{} (in the {} parameters)", e.into_inner(), kind.name()))
    })
}

fn at_least(at: &str, value: u32, low: u32, high: u32) -> Result<(), ModelError> {
    if value < low || value > high {
        return Err(ModelError::at(at, format!("expected an integer from {low} to {high}, got {value}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(yaml: &str) -> IndexMap<String, serde_yaml_ng::Value> {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    #[test]
    fn parameters_are_typed_per_kind_with_defaults() {
        let p = Program::parse(Kind::Nginx, &config("{worker_processes: 2}")).unwrap();
        assert_eq!(p, Program::Nginx(NginxConfig { worker_processes: 2, ..NginxConfig::default() }));
        let p = Program::parse(Kind::Redis, &config("{hz: 50, io_threads: 2}")).unwrap();
        assert_eq!(p, Program::Redis(RedisConfig { hz: 50, io_threads: 2, ..RedisConfig::default() }));
        let p = Program::parse(Kind::Memcached, &config("{}")).unwrap();
        assert_eq!(p, Program::Memcached(MemcachedConfig::default()));
        assert_eq!(Program::parse(Kind::Synthetic, &config("{}")).unwrap(), Program::Synthetic);
    }

    #[test]
    fn bad_parameters_name_the_key() {
        let e = Program::parse(Kind::Redis, &config("{io-threads: 2}")).unwrap_err();
        assert_eq!(e.path, "config.io-threads");
        assert!(e.message.contains("unknown field `io-threads`") && e.message.contains("io_threads"), "{e}");
        let e = Program::parse(Kind::Nginx, &config("{worker_processes: many}")).unwrap_err();
        assert_eq!(e.path, "config.worker_processes", "{e}");
        let e = Program::parse(Kind::Redis, &config("{hz: 0}")).unwrap_err();
        assert_eq!((e.path.as_str(), e.message.as_str()), ("config.hz", "expected an integer from 1 to 500, got 0"));
        let e = Program::parse(Kind::Redis, &config("{maxmemory_policy: lru}")).unwrap_err();
        assert_eq!(e.path, "config.maxmemory_policy");
        let e = Program::parse(Kind::Memcached, &config("{threads: 0}")).unwrap_err();
        assert_eq!(e.path, "config.threads");
        let e = Program::parse(Kind::Synthetic, &config("{hz: 1}")).unwrap_err();
        assert_eq!(e.path, "config");
    }
}
