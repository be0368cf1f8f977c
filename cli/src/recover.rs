//! Claims left by a process that stopped (R26).
//!
//! Every toolgate process that opens an inbox names itself with [`process_instance`]:
//! `toolgate:<host>:<boot id>:<pid>:<start time>`, recorded with each claim it makes. At
//! start (`toolgate mcp serve`, `toolgate serve`, every `toolgate inbox` and `toolgate policy`
//! command) and with `toolgate inbox recover`, [`recover_stopped`] looks at the calls left
//! `claimed` and marks `unknown` those whose claiming process is known to have stopped: one of
//! this machine's processes (same host name and boot) whose process id no longer runs, or runs
//! a process started at another time. A claim by a live process, by a process on another
//! machine, or by a library host's instance (another name) is left alone: it is its owner's
//! to record, or `toolgate inbox recover --instance NAME`'s once an operator knows it stopped.
//! An `unknown` call is never sent again automatically.

use std::collections::BTreeSet;

use toolgate_inbox::{InboxStore, State};

const PREFIX: &str = "toolgate";

fn read_trimmed(path: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let text = text.trim();
    (!text.is_empty() && !text.contains(':')).then(|| text.to_owned())
}

fn host() -> String {
    read_trimmed("/proc/sys/kernel/hostname")
        .or_else(|| read_trimmed("/etc/hostname"))
        .unwrap_or_else(|| String::from("?"))
}

fn boot_id() -> String {
    read_trimmed("/proc/sys/kernel/random/boot_id").unwrap_or_else(|| String::from("?"))
}

/// The start time of process `pid` (clock ticks after boot, `/proc/<pid>/stat` field 22),
/// `None` when no such process runs — none has that id, or it has exited and is only
/// waiting to be reaped (state `Z` or `X`) — or this system has no `/proc`.
fn start_time(pid: &str) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold anything: count after it.
    let after = stat.get(stat.rfind(')')? + 1..)?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    if matches!(fields.first(), Some(&("Z" | "X" | "x"))) {
        return None;
    }
    fields.get(19).map(|s| (*s).to_owned())
}

/// This process's instance name, recorded with each claim it makes.
pub(crate) fn process_instance() -> String {
    let pid = std::process::id().to_string();
    let start = start_time(&pid).unwrap_or_else(|| String::from("?"));
    format!("{PREFIX}:{}:{}:{pid}:{start}", host(), boot_id())
}

/// Whether the process that named itself `instance` ([`process_instance`]) is known to have
/// stopped: it ran on this machine since its last boot and its process id runs no process
/// started when it did. Anything that cannot be told is not known to have stopped.
fn stopped(instance: &str) -> bool {
    let parts: Vec<&str> = instance.split(':').collect();
    let [PREFIX, host_name, boot, pid, start] = parts.as_slice() else {
        return false;
    };
    if [*host_name, *boot, *start].contains(&"?") || *host_name != host() || *boot != boot_id() {
        return false;
    }
    if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return false;
    }
    start_time(pid).as_deref() != Some(*start)
}

/// Marks `unknown` the calls claimed by a process known to have stopped, and by `also` (an
/// instance an operator names); returns their ids.
pub(crate) async fn recover_stopped(
    store: &dyn InboxStore,
    also: Option<&str>,
) -> Result<Vec<String>, String> {
    let claimed = store
        .list(Some(State::Claimed))
        .await
        .map_err(|e| format!("the claimed calls cannot be listed: {e}"))?;
    let mut instances: BTreeSet<String> = claimed
        .into_iter()
        .filter_map(|r| r.claimed_by)
        .filter(|by| stopped(by))
        .collect();
    if let Some(name) = also {
        instances.insert(name.to_owned());
    }
    let mut ids = Vec::new();
    for instance in instances {
        let moved = store
            .recover_instance(&instance)
            .await
            .map_err(|e| format!("the calls `{instance}` claimed cannot be recovered: {e}"))?;
        ids.extend(moved);
    }
    Ok(ids)
}

/// [`recover_stopped`] at a command's start: says on standard error what it marked, and
/// only warns when it cannot (the command goes on; nothing is sent either way).
pub(crate) async fn recover_at_start(store: &dyn InboxStore) {
    match recover_stopped(store, None).await {
        Ok(ids) if ids.is_empty() => {}
        Ok(ids) => eprintln!(
            "toolgate: {} held call{} claimed by a process that stopped before recording the result {} now `unknown` (never sent again automatically): {}",
            ids.len(),
            if ids.len() == 1 { "" } else { "s" },
            if ids.len() == 1 { "is" } else { "are" },
            ids.join(", ")
        ),
        Err(e) => eprintln!("toolgate: warning: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r26_this_process_is_running_and_a_gone_one_has_stopped() {
        let me = process_instance();
        assert!(me.starts_with("toolgate:"), "{me}");
        assert!(!stopped(&me), "a live process has not stopped: {me}");
        let mut parts: Vec<String> = me.split(':').map(str::to_owned).collect();
        parts[4] = String::from("1");
        assert!(stopped(&parts.join(":")), "another start time: a reused id");
        parts[1] = String::from("another-host");
        assert!(!stopped(&parts.join(":")), "another machine's: not known");
        assert!(!stopped("default"), "a library host's instance: not known");
        assert!(!stopped("toolgate:h:b:x:1"));
    }
}
