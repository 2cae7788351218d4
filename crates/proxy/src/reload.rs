//! Config reload: the file is polled (its modification time and length, every [`POLL`]); when it
//! changed and is valid, the egress's upstreams (endpoints, routes, policies) are swapped for new
//! requests while requests in flight finish with the old ones. An invalid file is reported on
//! stderr and ignored; changes that need new sockets (listen addresses, the ingress, limits, tracing) are
//! reported and wait for a restart.

use crate::config::Config;
use crate::egress::Egress;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};
use tokio::sync::watch;

/// How often the file is checked.
pub const POLL: Duration = Duration::from_secs(1);

/// The watched file and what a reload updates.
pub struct Watch {
    /// The file.
    pub path: PathBuf,
    /// The configuration in force.
    pub current: Config,
    /// The egress whose upstreams a reload swaps, if there is one.
    pub egress: Option<Arc<Egress>>,
    /// The text the admin `/config` serves.
    pub source: Arc<RwLock<String>>,
}

type Stamp = Option<(SystemTime, u64)>;

impl Watch {
    fn stamp(&self) -> Stamp {
        let meta = std::fs::metadata(&self.path).ok()?;
        Some((meta.modified().ok()?, meta.len()))
    }

    /// Polls every `every` until `stop` turns true.
    pub async fn run(mut self, every: Duration, mut stop: watch::Receiver<bool>) {
        let mut seen = self.stamp();
        let mut interval = tokio::time::interval(every);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = interval.tick() => {
                    let stamp = self.stamp();
                    if stamp != seen {
                        seen = stamp;
                        self.reload();
                    }
                }
                changed = stop.changed() => {
                    if changed.is_err() || *stop.borrow() {
                        return;
                    }
                }
            }
        }
    }

    /// Reads the file again and applies what can be applied in place.
    fn reload(&mut self) {
        let new = match Config::load(&self.path) {
            Ok(new) => new,
            Err(e) => {
                eprintln!("tailguard proxy: ignoring the changed config: {e}");
                return;
            }
        };
        if new.source == self.current.source {
            return;
        }
        let restart =
            |what: &str| eprintln!("tailguard proxy: {}: {what} changed; restart to apply", self.path.display());
        match (&self.egress, &new.egress, &self.current.egress) {
            (Some(egress), Some(c), Some(old)) => {
                if c.listen != old.listen {
                    restart("egress.listen");
                }
                if let Err(e) = egress.reload(c) {
                    eprintln!("tailguard proxy: ignoring the changed config: {e}");
                    return;
                }
            }
            (_, None, None) => {}
            _ => restart("the presence of `egress`"),
        }
        let ingress = |c: &Config| c.ingress.as_ref().map(|i| format!("{i:?}"));
        if ingress(&new) != ingress(&self.current) {
            restart("ingress");
        }
        if new.limits != self.current.limits {
            restart("limits");
        }
        if new.workers != self.current.workers {
            restart("workers");
        }
        if new.admin.as_ref().map(|a| a.listen) != self.current.admin.as_ref().map(|a| a.listen) {
            restart("admin");
        }
        if new.tracing != self.current.tracing {
            restart("tracing");
        }
        *self.source.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = new.source.clone();
        eprintln!("tailguard proxy: reloaded {}", self.path.display());
        self.current = new;
    }
}
