//! `--isolation netns`: each replica in its own network namespace, joined by veth pairs to one
//! bridge in the lab's namespace, with `tc netem` adding the file's one-way per-hop delay (and
//! jitter) to every packet a namespace sends (so a call's round trip costs two delays, as in the
//! simulator). The bridge gets the same delay towards the namespaces, for the load generator's
//! hop. A replica's serve and sidecar talk over the namespace's own loopback, undelayed. A kernel
//! without `sch_netem` delays nothing: then the sidecars hold each hop themselves
//! ([`Network::kernel_delays`], docs/lab.md). Everything is removed when the [`Network`] is dropped
//! (after the run, on error, on Ctrl-C).

use crate::error::LabError;
use crate::plan::{Plan, Replica};
use std::process::Command;
use std::time::Duration;
use tailguard_model::schema::Network as Hops;

/// The namespaces and the bridge of one run.
pub struct Network {
    bridge: String,
    namespaces: Vec<String>,
    /// Whether `tc netem` delays the packets (false when the file has no delay, or the kernel
    /// has no `sch_netem`).
    pub kernel_delays: bool,
}

/// Whether `ip` and `tc` (Debian's iproute2) can be run.
pub fn available() -> Result<(), LabError> {
    for tool in ["ip", "tc"] {
        let ok = Command::new(tool).arg("-V").output().is_ok_and(|o| o.status.success());
        if !ok {
            return Err(LabError::Network(format!(
                "`{tool}` was not found: --isolation netns needs iproute2 (apt-get install iproute2) and root"
            )));
        }
    }
    Ok(())
}

/// Runs one command; an error quotes it and its stderr.
fn sh(args: &[&str]) -> Result<(), LabError> {
    let output = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| LabError::Network(format!("cannot run {}: {e}", args.join(" "))))?;
    if output.status.success() {
        return Ok(());
    }
    Err(LabError::Network(format!("`{}` failed: {}", args.join(" "), String::from_utf8_lossy(&output.stderr).trim())))
}

/// netem's delay arguments for a hop of `delay` plus a uniform draw in [0, `jitter`): netem's
/// jitter is uniform around the delay, so the delay is centred (`delay + jitter/2 ± jitter/2`).
fn netem_delay(hops: &Hops) -> Vec<String> {
    let micros = |d: Duration| format!("{}us", d.as_micros());
    let (delay, jitter) = (hops.delay.get(), hops.jitter.get());
    if jitter.is_zero() {
        return vec!["delay".into(), micros(delay)];
    }
    vec!["delay".into(), micros(delay + jitter / 2), micros(jitter / 2)]
}

impl Network {
    /// The namespace of `replica`.
    pub fn namespace(plan: &Plan, replica: &Replica) -> String {
        format!("tg{}-{}-{}", plan.slot, replica.service_index, replica.index)
    }

    /// Creates the bridge and one namespace per replica of `plan`, each with the `hops` delay on
    /// its link when the kernel can add it (see [`Network::kernel_delays`]). On failure, whatever
    /// was created is removed.
    pub fn create(plan: &Plan, hops: &Hops) -> Result<Network, LabError> {
        let slot = plan.slot;
        let mut net = Network { bridge: format!("tgbr{slot}"), namespaces: Vec::new(), kernel_delays: false };
        let bridge = net.bridge.clone();
        sh(&["ip", "link", "add", &bridge, "type", "bridge"])?;
        sh(&["ip", "addr", "add", &format!("{}/16", plan.isolation.host_address(slot)), "dev", &bridge])?;
        sh(&["ip", "link", "set", &bridge, "up"])?;
        let netem = netem_delay(hops);
        let netem: Vec<&str> = netem.iter().map(String::as_str).collect();
        // The first netem qdisc tells whether the kernel has sch_netem at all.
        net.kernel_delays = !hops.is_zero()
            && sh(&[&["tc", "qdisc", "add", "dev", &bridge, "root", "netem"], &netem[..]].concat()).is_ok();
        for r in &plan.replicas {
            let ns = Network::namespace(plan, r);
            sh(&["ip", "netns", "add", &ns])?;
            net.namespaces.push(ns.clone());
            let host = format!("tg{slot}h{}x{}", r.service_index, r.index);
            let inside = format!("tg{slot}n{}x{}", r.service_index, r.index);
            sh(&["ip", "link", "add", &host, "type", "veth", "peer", "name", &inside])?;
            sh(&["ip", "link", "set", &inside, "netns", &ns])?;
            sh(&["ip", "link", "set", &host, "master", &bridge, "up"])?;
            sh(&["ip", "-n", &ns, "addr", "add", &format!("{}/16", r.ip), "dev", &inside])?;
            sh(&["ip", "-n", &ns, "link", "set", &inside, "up"])?;
            sh(&["ip", "-n", &ns, "link", "set", "lo", "up"])?;
            if net.kernel_delays {
                let qdisc = ["ip", "netns", "exec", &ns, "tc", "qdisc", "add", "dev", &inside, "root", "netem"];
                sh(&[&qdisc[..], &netem[..]].concat())?;
            }
        }
        Ok(net)
    }

    /// `command` run inside `replica`'s namespace (`ip netns exec` execs it: the PID is the
    /// command's own).
    pub fn wrap(plan: &Plan, replica: &Replica, command: &Command) -> Command {
        let mut wrapped = Command::new("ip");
        wrapped.args(["netns", "exec", &Network::namespace(plan, replica)]);
        wrapped.arg(command.get_program()).args(command.get_args());
        wrapped
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        // Deleting a namespace deletes the veth pair in it.
        for ns in self.namespaces.drain(..) {
            let _ = sh(&["ip", "netns", "del", &ns]);
        }
        let _ = sh(&["ip", "link", "del", &self.bridge]);
    }
}
