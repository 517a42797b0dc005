//! The opt-in kill path of idle-reclaim policies (`--allow-reclaim-kill`, docs/ACTIONS.md):
//! the agent polls the server for kill commands of its hosts and sends SIGTERM to a process
//! only when the PID is on the named GPU in the agent's own newest process list, owned by the
//! user the command names, and /proc still says that user runs it (a PID reused since is left
//! alone). Every answer, killed or refused, goes back to the server's reclaim log.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use fleetlens_api::reclaim::{AgentCommand, CommandResult};
use fleetlens_core::GpuProcess;

use crate::source::procinfo::{parse_passwd, parse_status_uid};
use crate::source::{Annotate, Annotated, HostSamples};

/// A GPU's host and its newest process list.
type Listed = (String, Vec<GpuProcess>);

/// Per GPU: its host and its newest process list, as this agent read it.
#[derive(Debug, Clone, Default)]
pub struct ProcessBoard(Arc<Mutex<HashMap<String, Listed>>>);

impl ProcessBoard {
    fn record(&self, hosts: &[HostSamples]) {
        let mut board = self.0.lock().expect("board lock");
        for h in hosts {
            for s in &h.samples {
                if let Some(p) = &s.processes {
                    board.insert(s.uuid.clone(), (h.host.clone(), p.clone()));
                }
            }
        }
    }

    /// The hosts this agent reports.
    pub fn hosts(&self) -> Vec<String> {
        let mut hosts: Vec<String> = self.0.lock().expect("board lock").values().map(|(h, _)| h.clone()).collect();
        hosts.sort();
        hosts.dedup();
        hosts
    }

    fn processes(&self, gpu: &str) -> Option<Listed> {
        self.0.lock().expect("board lock").get(gpu).cloned()
    }
}

/// A source that also writes every reading's process lists on a [`ProcessBoard`].
pub type Watched = Annotated<ProcessBoard>;

#[async_trait]
impl Annotate for ProcessBoard {
    async fn annotate(&mut self, hosts: &mut [HostSamples]) {
        self.record(hosts);
    }
}

/// Why a command is refused, or `Ok` when the process may be sent SIGTERM.
pub fn check(
    board: &ProcessBoard,
    proc_root: &Path,
    passwd: &HashMap<u32, String>,
    c: &AgentCommand,
) -> Result<u32, String> {
    let pid = u32::try_from(c.pid).ok().filter(|p| *p > 1 && *p != std::process::id()).ok_or("not a PID to signal")?;
    let (_, procs) = board.processes(&c.gpu).ok_or_else(|| format!("GPU {} is not one of this agent's", c.gpu))?;
    let p = procs
        .iter()
        .find(|p| p.pid == pid)
        .ok_or_else(|| format!("pid {pid} is not on GPU {} in the newest process list", c.gpu))?;
    let listed = p.owner.as_ref().and_then(|o| o.user.clone()).or_else(|| p.user.clone());
    if listed.as_deref() != Some(c.owner_user.as_str()) || c.owner_user.is_empty() {
        return Err(format!(
            "pid {pid} on GPU {} belongs to {}, not {}",
            c.gpu,
            listed.as_deref().unwrap_or("an unknown user"),
            c.owner_user
        ));
    }
    let status = std::fs::read_to_string(proc_root.join(pid.to_string()).join("status"))
        .map_err(|e| format!("pid {pid} is gone ({e})"))?;
    let uid = parse_status_uid(&status).ok_or_else(|| format!("pid {pid}: no Uid line in its status"))?;
    let user = passwd.get(&uid).cloned().unwrap_or_else(|| uid.to_string());
    if user != c.owner_user {
        return Err(format!("pid {pid} now runs as {user}, not {} (the PID was reused)", c.owner_user));
    }
    Ok(pid)
}

/// SIGTERM.
pub fn terminate(pid: u32) -> Result<(), String> {
    let pid = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw).ok_or("not a PID")?;
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).map_err(|e| format!("kill: {e}"))
}

/// Poll for commands every `every`, for as long as the agent runs.
pub async fn run(server: String, api_key: Option<String>, board: ProcessBoard, proc_root: PathBuf, every: Duration) {
    let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().expect("an HTTP client");
    let base = server.trim_end_matches('/').to_string();
    loop {
        tokio::time::sleep(every).await;
        let passwd = std::fs::read_to_string("/etc/passwd").map(|t| parse_passwd(&t)).unwrap_or_default();
        for host in board.hosts() {
            let mut req = client.post(format!("{base}/api/v1/agent/commands/take")).query(&[("host", host.as_str())]);
            if let Some(k) = &api_key {
                req = req.bearer_auth(k);
            }
            let commands: Vec<AgentCommand> = match req.send().await {
                Ok(r) if r.status().is_success() => r.json().await.unwrap_or_default(),
                Ok(r) => {
                    tracing::warn!(status = %r.status(), "reclaim: the server refused the command poll");
                    continue;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "reclaim: command poll failed");
                    continue;
                }
            };
            for c in commands {
                let (result, detail) = match check(&board, &proc_root, &passwd, &c).and_then(|pid| {
                    terminate(pid)?;
                    Ok(pid)
                }) {
                    Ok(pid) => ("killed", format!("SIGTERM sent to pid {pid} of {} on GPU {}", c.owner_user, c.gpu)),
                    Err(why) => ("refused", why),
                };
                tracing::info!(command = c.id.get(), pid = c.pid, result, detail, "reclaim kill command");
                let mut req = client
                    .post(format!("{base}/api/v1/agent/commands/{}/result", c.id))
                    .json(&CommandResult { host: host.clone(), result: result.into(), detail });
                if let Some(k) = &api_key {
                    req = req.bearer_auth(k);
                }
                if let Err(e) = req.send().await {
                    tracing::warn!(error = %e, command = c.id.get(), "reclaim: could not report a command's result");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetlens_core::{AgentCommandId, ProcessOwner, ReclaimId, Sample};

    fn board_with(pid: u32, user: &str) -> ProcessBoard {
        let board = ProcessBoard::default();
        let p = GpuProcess {
            pid,
            owner: Some(ProcessOwner { user: Some(user.into()), ..Default::default() }),
            ..Default::default()
        };
        let s = Sample { uuid: "GPU-1".into(), processes: Some(vec![p]), ..Default::default() };
        board.record(&[HostSamples { host: "h".into(), samples: vec![s], labels: Default::default(), events: vec![] }]);
        board
    }

    #[test]
    fn only_a_listed_pid_of_the_named_owner_still_run_by_that_user_passes() {
        let me = std::process::id();
        let status = std::fs::read_to_string(format!("/proc/{me}/status")).unwrap();
        let uid = parse_status_uid(&status).unwrap();
        let passwd: HashMap<u32, String> = [(uid, "tester".to_string())].into();
        let proc_root = Path::new("/proc");
        // A real child process of this test, run by our own user.
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        let cmd = |gpu: &str, pid: u32, user: &str| AgentCommand {
            id: AgentCommandId(1),
            reclaim_id: ReclaimId(1),
            gpu: gpu.into(),
            pid: i64::from(pid),
            owner_user: user.into(),
        };
        let board = board_with(pid, "tester");
        assert_eq!(check(&board, proc_root, &passwd, &cmd("GPU-1", pid, "tester")), Ok(pid));
        // Not listed on that GPU, listed under someone else, or another GPU: refused.
        assert!(check(&board, proc_root, &passwd, &cmd("GPU-2", pid, "tester")).is_err());
        assert!(check(&board, proc_root, &passwd, &cmd("GPU-1", pid + 1, "tester")).is_err());
        let err = check(&board, proc_root, &passwd, &cmd("GPU-1", pid, "mallory")).unwrap_err();
        assert!(err.contains("belongs to tester"), "{err}");
        // Listed as mallory's, but /proc says it is ours: a reused PID, refused.
        let reused = board_with(pid, "mallory");
        let err = check(&reused, proc_root, &passwd, &cmd("GPU-1", pid, "mallory")).unwrap_err();
        assert!(err.contains("now runs as tester"), "{err}");
        // Our own agent is never a target.
        assert!(check(&board_with(me, "tester"), proc_root, &passwd, &cmd("GPU-1", me, "tester")).is_err());
        // The one that passes is really terminated by SIGTERM.
        terminate(pid).unwrap();
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(15), "{status:?}");
        // Gone now: refused.
        assert!(check(&board, proc_root, &passwd, &cmd("GPU-1", pid, "tester")).unwrap_err().contains("gone"));
    }
}
