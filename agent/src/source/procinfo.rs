//! Who a GPU process is, from `/proc/<pid>/{cmdline,status,cgroup}`: its command line, its user
//! and the container (or cgroup) it runs in. NVML reports host PIDs, so this sees them only where
//! the agent shares the host's PID namespace (or is given the host's /proc with `--proc-root`);
//! elsewhere the fields stay absent.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Longest command line kept (the server accepts 4096 bytes; a short head is what people read).
pub const MAX_COMMAND_LEN: usize = 1024;

/// What /proc says about one process. Every field is absent where it could not be read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcInfo {
    pub command: Option<String>,
    pub user: Option<String>,
    pub container_id: Option<String>,
}

/// Cuts `s` to at most `max` bytes on a character boundary.
fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

/// `/proc/<pid>/cmdline`: NUL-separated arguments, joined by spaces. Empty for kernel threads
/// and zombies.
pub fn parse_cmdline(raw: &[u8]) -> Option<String> {
    let args: Vec<String> = raw
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).chars().map(|c| if c.is_control() { ' ' } else { c }).collect())
        .collect();
    let joined = args.join(" ");
    let joined = joined.trim();
    (!joined.is_empty()).then(|| truncate(joined.to_string(), MAX_COMMAND_LEN))
}

/// `Name:` of `/proc/<pid>/status` (the executable's short name).
pub fn parse_status_name(status: &str) -> Option<String> {
    status.lines().find_map(|l| l.strip_prefix("Name:")).map(|n| n.trim().to_string()).filter(|n| !n.is_empty())
}

/// Real UID from the `Uid:` line of `/proc/<pid>/status`.
pub fn parse_status_uid(status: &str) -> Option<u32> {
    status.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|rest| rest.split_whitespace().next()?.parse().ok())
}

/// `/etc/passwd` as uid → name.
pub fn parse_passwd(text: &str) -> HashMap<u32, String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            let _pw = f.next()?;
            let uid = f.next()?.parse().ok()?;
            (!name.is_empty()).then(|| (uid, name.to_string()))
        })
        .collect()
}

fn is_container_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A container (or batch job) named by one segment of a cgroup path, given the segment
/// before it.
fn container_in_segment(prev: Option<&str>, seg: &str) -> Option<String> {
    let scope = seg.strip_suffix(".scope").unwrap_or(seg);
    // systemd cgroup driver: <runtime>-<id>.scope
    for (prefix, runtime) in
        [("docker-", "docker"), ("cri-containerd-", "containerd"), ("crio-", "cri-o"), ("libpod-", "podman")]
    {
        if let Some(id) = scope.strip_prefix(prefix)
            && is_container_id(id)
        {
            return Some(format!("{runtime}://{id}"));
        }
    }
    // cgroupfs driver: .../docker/<id>, .../kubepods/<qos>/pod<uid>/<id>, .../actions_job/<id>
    if is_container_id(seg) {
        return Some(match prev {
            Some("docker") => format!("docker://{seg}"),
            Some(p) if p.starts_with("crio") => format!("cri-o://{seg}"),
            _ => seg.to_string(),
        });
    }
    // LXC / Incus: /lxc/<name> or /lxc.payload.<name>
    if let Some(name) = seg.strip_prefix("lxc.payload.") {
        return Some(format!("lxc://{name}"));
    }
    if prev == Some("lxc") {
        return Some(format!("lxc://{seg}"));
    }
    // Slurm: /system.slice/slurmstepd.scope/job_<id>/step_<n>/…, or /slurm/uid_<u>/job_<id>/…
    if let Some(job) = seg.strip_prefix("job_")
        && !job.is_empty()
        && job.bytes().all(|b| b.is_ascii_digit())
    {
        return Some(format!("slurm://{job}"));
    }
    None
}

/// The container a process runs in, from `/proc/<pid>/cgroup`: `docker://<id>`,
/// `containerd://<id>`, `cri-o://<id>`, `podman://<id>`, `lxc://<name>`, `slurm://<job>`, a
/// bare 64-hex id where the runtime is not named; outside any container the cgroup path itself
/// (e.g. `/user.slice/user-1000.slice/session-3.scope`); none for the root cgroup.
pub fn parse_cgroup(text: &str) -> Option<String> {
    // (controllers, path) of every line; the unified (v2) line has no controllers.
    let lines: Vec<(&str, &str)> = text
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, ':');
            let _id = f.next()?;
            let ctrl = f.next()?;
            let path = f.next()?.trim();
            Some((ctrl, path))
        })
        .collect();
    for (_, path) in &lines {
        let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        // The innermost container wins (nested: a pod inside a VM slice …).
        for i in (0..segs.len()).rev() {
            let prev = i.checked_sub(1).map(|j| segs[j]);
            if let Some(c) = container_in_segment(prev, segs[i]) {
                return Some(c);
            }
        }
    }
    // No container: the most telling path, unified hierarchy first.
    let pick = lines
        .iter()
        .find(|(c, _)| c.is_empty())
        .or_else(|| lines.iter().find(|(c, _)| *c == "name=systemd"))
        .or_else(|| lines.iter().find(|(c, _)| c.split(',').any(|x| x == "memory" || x == "cpu")))
        .or_else(|| lines.first());
    pick.map(|(_, p)| p.to_string()).filter(|p| !p.is_empty() && p.as_str() != "/")
}

/// Reads /proc for GPU processes and remembers the answers for as long as the PID is on a GPU.
#[derive(Debug)]
pub struct ProcTable {
    root: PathBuf,
    passwd: Option<HashMap<u32, String>>,
    cache: HashMap<u32, ProcInfo>,
}

impl ProcTable {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into(), passwd: None, cache: HashMap::new() }
    }

    fn user_name(&mut self, uid: u32) -> String {
        let users = self.passwd.get_or_insert_with(|| {
            std::fs::read_to_string("/etc/passwd").map(|t| parse_passwd(&t)).unwrap_or_default()
        });
        users.get(&uid).cloned().unwrap_or_else(|| uid.to_string())
    }

    /// What /proc says about `pid` (cached).
    pub fn get(&mut self, pid: u32) -> ProcInfo {
        if let Some(info) = self.cache.get(&pid) {
            return info.clone();
        }
        let info = self.read(pid);
        // A process that is gone (or invisible) is not cached: it may become visible.
        if info != ProcInfo::default() {
            self.cache.insert(pid, info.clone());
        }
        info
    }

    fn read(&mut self, pid: u32) -> ProcInfo {
        let dir = self.root.join(pid.to_string());
        let status = std::fs::read_to_string(dir.join("status")).ok();
        let command = std::fs::read(dir.join("cmdline"))
            .ok()
            .and_then(|raw| parse_cmdline(&raw))
            .or_else(|| status.as_deref().and_then(parse_status_name).map(|n| format!("[{n}]")));
        let user = status.as_deref().and_then(parse_status_uid).map(|uid| self.user_name(uid));
        let container_id = std::fs::read_to_string(dir.join("cgroup")).ok().and_then(|t| parse_cgroup(&t));
        ProcInfo { command, user, container_id }
    }

    /// Forgets every PID not in `alive` (PIDs get reused).
    pub fn retain(&mut self, alive: &std::collections::HashSet<u32>) {
        self.cache.retain(|pid, _| alive.contains(pid));
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/proc").join(name);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    const DOCKER_ID: &str = "3f1c0e0a9b0e4d6c8e2f7a1b5c9d3e7f0a2b4c6d8e0f1a3b5c7d9e1f2a4b6c8d";

    #[test]
    fn cgroups_of_recorded_hosts() {
        let cases = [
            ("cgroup-v2-docker.txt", format!("docker://{DOCKER_ID}")),
            ("cgroup-v1-docker.txt", format!("docker://{DOCKER_ID}")),
            (
                "cgroup-v2-k8s-containerd.txt",
                "containerd://9b2d6f1e8a7c5b3d1f0e2a4c6b8d0f1e3a5c7b9d1f2e4a6c8b0d2f4e6a8c0b1d".into(),
            ),
            ("cgroup-v1-k8s-cgroupfs.txt", "5e8a1c3f7b9d2e4a6c8f0b1d3e5a7c9f1b3d5e7a9c0f2b4d6e8a1c3f5b7d9e0a".into()),
            ("cgroup-v2-crio.txt", "cri-o://7a9c1e3b5d7f9a1c3e5b7d9f1a3c5e7b9d1f3a5c7e9b1d3f5a7c9e1b3d5f7a9c".into()),
            (
                "cgroup-v2-podman.txt",
                "podman://1d3f5a7c9e1b3d5f7a9c1e3b5d7f9a1c3e5b7d9f1a3c5e7b9d1f3a5c7e9b1d3f".into(),
            ),
            ("cgroup-v2-slurm.txt", "slurm://48213".into()),
            ("cgroup-v2-user-session.txt", "/user.slice/user-1000.slice/session-4.scope".into()),
            ("cgroup-v2-systemd-service.txt", "/system.slice/jupyter.service".into()),
            ("cgroup-v1-systemd-user.txt", "/user.slice/user-1001.slice/session-12.scope".into()),
        ];
        for (file, want) in cases {
            assert_eq!(parse_cgroup(&fixture(file)).as_deref(), Some(want.as_str()), "{file}");
        }
        assert_eq!(parse_cgroup(&fixture("cgroup-v2-root.txt")), None);
        assert_eq!(parse_cgroup(""), None);
    }

    #[test]
    fn cmdline_status_passwd() {
        let raw = b"python3\0-u\0train.py\0--batch-size\x0064\0";
        assert_eq!(parse_cmdline(raw).as_deref(), Some("python3 -u train.py --batch-size 64"));
        assert_eq!(parse_cmdline(b""), None);
        assert_eq!(parse_cmdline(b"\0\0"), None);
        let long = vec![b'x'; 5000];
        assert_eq!(parse_cmdline(&long).unwrap().len(), MAX_COMMAND_LEN);
        // Multi-byte characters are not cut in half.
        let mut euro = "€".repeat(400).into_bytes();
        euro.push(0);
        let c = parse_cmdline(&euro).unwrap();
        assert!(c.len() <= MAX_COMMAND_LEN && c.chars().all(|ch| ch == '€'));

        let status = fixture("status-python.txt");
        assert_eq!(parse_status_name(&status).as_deref(), Some("python3"));
        assert_eq!(parse_status_uid(&status), Some(1000));
        let users = parse_passwd("root:x:0:0:root:/root:/bin/bash\n# c\nalice:x:1000:1000::/home/alice:/bin/sh\nbad\n");
        assert_eq!(users.get(&1000).map(String::as_str), Some("alice"));
        assert_eq!(users.get(&0).map(String::as_str), Some("root"));
        assert_eq!(users.len(), 2);
    }

    #[test]
    fn reads_a_proc_tree() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("4242");
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("cmdline"), b"python3\0train.py\0").unwrap();
        std::fs::write(p.join("status"), fixture("status-python.txt")).unwrap();
        std::fs::write(p.join("cgroup"), fixture("cgroup-v2-docker.txt")).unwrap();
        let k = dir.path().join("7");
        std::fs::create_dir_all(&k).unwrap();
        std::fs::write(k.join("cmdline"), b"").unwrap();
        std::fs::write(k.join("status"), "Name:\tkworker/0:1\nUid:\t0\t0\t0\t0\n").unwrap();

        let mut t = ProcTable::new(dir.path());
        let info = t.get(4242);
        assert_eq!(info.command.as_deref(), Some("python3 train.py"));
        assert!(info.user.is_some());
        assert_eq!(info.container_id, Some(format!("docker://{DOCKER_ID}")));
        assert_eq!(t.get(7).command.as_deref(), Some("[kworker/0:1]"));
        // Invisible PIDs give nothing, and are not cached.
        assert_eq!(t.get(999_999), ProcInfo::default());
        assert!(!t.cache.contains_key(&999_999));
        // Cached until the PID leaves the GPUs.
        std::fs::remove_dir_all(&p).unwrap();
        assert_eq!(t.get(4242).command.as_deref(), Some("python3 train.py"));
        t.retain(&[7].into_iter().collect());
        assert_eq!(t.get(4242), ProcInfo::default());
    }
}
