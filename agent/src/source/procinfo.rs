//! Who a GPU process is, from `/proc/<pid>/{cmdline,status,cgroup,environ}`: its command line,
//! its user, the container (or cgroup) it runs in, and its owner (`ProcessOwner`: Kubernetes pod
//! UID from the cgroup path, Slurm job from the environment, `--label-from-env` variables). NVML reports host PIDs, so this sees them only where
//! the agent shares the host's PID namespace (or is given the host's /proc with `--proc-root`);
//! elsewhere the fields stay absent.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use fleetlens_core::ProcessOwner;

/// Longest command line kept (the server accepts 4096 bytes; a short head is what people read).
pub const MAX_COMMAND_LEN: usize = 1024;

/// What /proc says about one process. Every field is absent where it could not be read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcInfo {
    pub command: Option<String>,
    pub user: Option<String>,
    pub container_id: Option<String>,
    /// `None` when nothing about the owner could be read.
    pub owner: Option<ProcessOwner>,
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

/// Environment variables the owner comes from (besides `--label-from-env` ones).
pub const SLURM_JOB_ID: &str = "SLURM_JOB_ID";
pub const SLURM_JOB_USER: &str = "SLURM_JOB_USER";
pub const SLURM_JOB_PARTITION: &str = "SLURM_JOB_PARTITION";
/// Set by a pod spec through the downward API (`fieldRef: metadata.name` / `metadata.namespace`);
/// a common convention, not something kubelet does by itself. Read only for processes whose
/// cgroup says they run in a pod.
pub const POD_NAME: &str = "POD_NAME";
pub const POD_NAMESPACE: &str = "POD_NAMESPACE";

/// `/proc/<pid>/environ` (NUL-separated `NAME=value`), keeping only the variables `wanted`
/// names. Values are cut to 1024 bytes; empty values count as absent.
pub fn parse_environ(raw: &[u8], wanted: &dyn Fn(&str) -> bool) -> HashMap<String, String> {
    raw.split(|b| *b == 0)
        .filter_map(|entry| {
            let eq = entry.iter().position(|b| *b == b'=')?;
            let name = std::str::from_utf8(&entry[..eq]).ok()?;
            if name.is_empty() || !wanted(name) {
                return None;
            }
            let value = String::from_utf8_lossy(&entry[eq + 1..]).trim().to_string();
            (!value.is_empty()).then(|| (name.to_string(), truncate(value, 1024)))
        })
        .collect()
}

/// The Kubernetes pod UID in a cgroup path: `…/kubepods/<qos>/pod<uid>/…` (cgroupfs driver) or
/// `…/kubepods-<qos>-pod<uid with _ for ->.slice/…` (systemd driver), v1 or v2.
pub fn parse_pod_uid(cgroup: &str) -> Option<String> {
    for line in cgroup.lines() {
        let path = line.splitn(3, ':').nth(2)?;
        if !path.contains("kubepods") {
            continue;
        }
        for seg in path.split('/') {
            let seg = seg.strip_suffix(".slice").unwrap_or(seg);
            // systemd: kubepods-besteffort-pod<uid>; cgroupfs: pod<uid>
            let uid = seg.rsplit_once("-pod").map(|(_, u)| u).or_else(|| seg.strip_prefix("pod"));
            if let Some(uid) = uid {
                let uid = uid.replace('_', "-");
                if uid.len() >= 32 && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
                    return Some(uid);
                }
            }
        }
    }
    None
}

/// The owner of a process from what /proc gave: its user name, its cgroup file, and the
/// environment variables kept by [`parse_environ`]. `label_vars`: the `--label-from-env`
/// variable names. `None` when nothing is known.
pub fn owner_of(
    user: Option<String>,
    cgroup: Option<&str>,
    env: &HashMap<String, String>,
    label_vars: &[String],
) -> Option<ProcessOwner> {
    let container = cgroup.and_then(parse_cgroup);
    let pod_uid = cgroup.and_then(parse_pod_uid);
    let cgroup_job = container.as_deref().and_then(|c| c.strip_prefix("slurm://")).map(str::to_string);
    let is_container = container.as_deref().is_some_and(|c| {
        (c.contains("://") && !c.starts_with("slurm://")) || (c.len() == 64 && c.bytes().all(|b| b.is_ascii_hexdigit()))
    });
    let var = |n: &str| env.get(n).cloned();
    let in_pod = pod_uid.is_some();
    let owner = ProcessOwner {
        user,
        container_id: if is_container { container } else { None },
        pod_name: in_pod.then(|| var(POD_NAME)).flatten(),
        namespace: in_pod.then(|| var(POD_NAMESPACE)).flatten(),
        pod_uid,
        job_id: var(SLURM_JOB_ID).or(cgroup_job),
        job_user: var(SLURM_JOB_USER),
        job_partition: var(SLURM_JOB_PARTITION),
        labels: label_vars.iter().filter_map(|n| Some((n.clone(), var(n)?))).collect::<BTreeMap<_, _>>(),
        // From the Kubernetes API, not /proc (`kube_meta`).
        ..ProcessOwner::default()
    };
    (!owner.is_empty()).then_some(owner)
}

/// Reads /proc for GPU processes and remembers the answers for as long as the PID is on a GPU.
#[derive(Debug)]
pub struct ProcTable {
    root: PathBuf,
    passwd: Option<HashMap<u32, String>>,
    cache: HashMap<u32, ProcInfo>,
    /// `--label-from-env` variable names.
    label_vars: Vec<String>,
}

impl ProcTable {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into(), passwd: None, cache: HashMap::new(), label_vars: Vec::new() }
    }

    /// Also reads these environment variables into the owner's labels (`--label-from-env`).
    pub fn with_label_vars(mut self, vars: Vec<String>) -> Self {
        self.label_vars = vars;
        self
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
        let cgroup = std::fs::read_to_string(dir.join("cgroup")).ok();
        let container_id = cgroup.as_deref().and_then(parse_cgroup);
        // Readable by the process's own user and root (or CAP_SYS_PTRACE) only: elsewhere the
        // environment's fields stay absent.
        let labels = &self.label_vars;
        let wanted = |n: &str| {
            matches!(n, SLURM_JOB_ID | SLURM_JOB_USER | SLURM_JOB_PARTITION | POD_NAME | POD_NAMESPACE)
                || labels.iter().any(|l| l == n)
        };
        let env = std::fs::read(dir.join("environ")).map(|raw| parse_environ(&raw, &wanted)).unwrap_or_default();
        let owner = owner_of(user.clone(), cgroup.as_deref(), &env, &self.label_vars);
        ProcInfo { command, user, container_id, owner }
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

    fn owners_fixture(name: &str) -> Vec<u8> {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/owners").join(name);
        std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    fn owners_text(name: &str) -> String {
        String::from_utf8(owners_fixture(name)).unwrap()
    }

    fn all(_: &str) -> bool {
        true
    }

    #[test]
    fn pod_uids_of_recorded_layouts() {
        let cases = [
            (fixture("cgroup-v2-k8s-containerd.txt"), Some("6a1f2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d")),
            (fixture("cgroup-v1-k8s-cgroupfs.txt"), Some("0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b")),
            (fixture("cgroup-v2-crio.txt"), Some("1b2c3d4e-5f6a-7b8c-9d0e-1f2a3b4c5d6e")),
            (owners_text("cgroup-v2-k8s-systemd-besteffort.txt"), Some("0b6f2a44-9c1d-4e5f-8a7b-6c5d4e3f2a1b")),
            (owners_text("cgroup-v1-k8s-burstable-docker.txt"), Some("7c6b5a49-3e2d-4c1b-9a8f-7e6d5c4b3a29")),
            (fixture("cgroup-v2-docker.txt"), None),
            (fixture("cgroup-v2-slurm.txt"), None),
            (fixture("cgroup-v2-user-session.txt"), None),
            (fixture("cgroup-v2-root.txt"), None),
            ("0::/kubepods.slice/kubepods-burstable.slice\n".to_string(), None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_pod_uid(&text).as_deref(), want, "{text}");
        }
    }

    #[test]
    fn environ_keeps_only_wanted_non_empty() {
        let env = parse_environ(&owners_fixture("environ-slurm.bin"), &all);
        assert_eq!(env.get("SLURM_JOB_ID").map(String::as_str), Some("48213"));
        assert_eq!(env.get("EMPTY_VAR"), None, "empty is absent");
        let only = parse_environ(&owners_fixture("environ-slurm.bin"), &|n| n == "EXPERIMENT_ID");
        assert_eq!(only.len(), 1);
        assert_eq!(only["EXPERIMENT_ID"], "exp-42");
        // No '=' or a missing name: skipped; values with '=' kept whole.
        let env = parse_environ(b"NOEQ\0=x\0A=b=c\0", &all);
        assert_eq!(env.len(), 1);
        assert_eq!(env["A"], "b=c");
    }

    #[test]
    fn owners_of_recorded_layouts() {
        let labels = vec!["EXPERIMENT_ID".to_string(), "RUN".to_string()];
        let env_of = |f: &str| parse_environ(&owners_fixture(f), &all);
        // Slurm: job from the environment; the cgroup's job id agrees.
        let o =
            owner_of(Some("bob".into()), Some(&fixture("cgroup-v2-slurm.txt")), &env_of("environ-slurm.bin"), &labels)
                .unwrap();
        assert_eq!(o.user.as_deref(), Some("bob"));
        assert_eq!(o.job_id.as_deref(), Some("48213"));
        assert_eq!(o.job_user.as_deref(), Some("bob"));
        assert_eq!(o.job_partition.as_deref(), Some("gpu-h100"));
        assert_eq!(o.labels, BTreeMap::from([("EXPERIMENT_ID".to_string(), "exp-42".to_string())]));
        assert_eq!((o.container_id, o.pod_uid, o.pod_name, o.namespace), (None, None, None, None));
        // Slurm job from the cgroup alone (environment unreadable): id only, no user/partition.
        let o = owner_of(None, Some(&owners_text("cgroup-v2-slurm-cgroupfs.txt")), &HashMap::new(), &labels).unwrap();
        assert_eq!(o.job_id.as_deref(), Some("51077"));
        assert_eq!((o.job_user, o.job_partition, o.user), (None, None, None));
        // Kubernetes with the downward API's POD_NAME / POD_NAMESPACE.
        let cg = owners_text("cgroup-v2-k8s-systemd-besteffort.txt");
        let o = owner_of(Some("1000".into()), Some(&cg), &env_of("environ-k8s-downward-api.bin"), &labels).unwrap();
        assert_eq!(o.pod_uid.as_deref(), Some("0b6f2a44-9c1d-4e5f-8a7b-6c5d4e3f2a1b"));
        assert_eq!(o.pod_name.as_deref(), Some("nb-alice"));
        assert_eq!(o.namespace.as_deref(), Some("ml"));
        assert_eq!(
            o.container_id.as_deref(),
            Some("containerd://2c4e6a8b0d1f3e5a7c9b1d3f5e7a9c0b2d4f6e8a1c3e5b7d9f0a2c4e6b8d1f3a")
        );
        assert_eq!(o.job_id, None);
        // Kubernetes without them: the pod UID only; HOSTNAME is not taken for the pod name.
        let o = owner_of(None, Some(&cg), &env_of("environ-k8s-plain.bin"), &labels).unwrap();
        assert!(o.pod_uid.is_some());
        assert_eq!((o.pod_name, o.namespace), (None, None));
        // POD_NAME outside a pod's cgroup is not believed.
        let o =
            owner_of(None, Some(&fixture("cgroup-v2-docker.txt")), &env_of("environ-k8s-downward-api.bin"), &labels)
                .unwrap();
        assert_eq!((o.pod_name, o.namespace, o.pod_uid), (None, None, None));
        assert_eq!(o.container_id, Some(format!("docker://{DOCKER_ID}")));
        // A v1 cgroupfs pod (bare container id).
        let o = owner_of(None, Some(&owners_text("cgroup-v1-k8s-burstable-docker.txt")), &HashMap::new(), &[]).unwrap();
        assert_eq!(o.pod_uid.as_deref(), Some("7c6b5a49-3e2d-4c1b-9a8f-7e6d5c4b3a29"));
        assert_eq!(o.container_id.as_deref(), Some("8e1f3a5c7b9d2e4f6a8c0b1d3e5f7a9c1b3d5e7f9a0c2b4d6e8f1a3c5b7d9e0f"));
        // A user session: a cgroup path is not a container; nothing known → no owner.
        let o = owner_of(Some("alice".into()), Some(&fixture("cgroup-v2-user-session.txt")), &HashMap::new(), &[]);
        assert_eq!(o, Some(ProcessOwner { user: Some("alice".into()), ..Default::default() }));
        assert_eq!(owner_of(None, Some(&fixture("cgroup-v2-root.txt")), &HashMap::new(), &labels), None);
        assert_eq!(owner_of(None, None, &HashMap::new(), &labels), None);
    }

    /// A real process on this machine: its environment carries a Slurm job and a label
    /// variable; the agent reads them from /proc/<pid>/environ, its user from `status`.
    #[test]
    fn owner_of_a_real_child_process() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env("SLURM_JOB_ID", "777001")
            .env("SLURM_JOB_USER", "slurm-tester")
            .env("SLURM_JOB_PARTITION", "debug")
            .env("EXPERIMENT_ID", "exp-real-1")
            .env("NOT_A_LABEL", "x")
            .spawn()
            .unwrap();
        let pid = child.id();
        // The environment is in /proc once the child has exec'd.
        let environ = Path::new("/proc").join(pid.to_string()).join("environ");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::fs::read(&environ).map(|e| !e.windows(12).any(|w| w == b"SLURM_JOB_ID")).unwrap_or(true) {
            assert!(std::time::Instant::now() < deadline, "child never exec'd");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let mut t = ProcTable::new("/proc").with_label_vars(vec!["EXPERIMENT_ID".into(), "ABSENT_VAR".into()]);
        let info = t.get(pid);
        child.kill().unwrap();
        child.wait().unwrap();
        let owner = info.owner.expect("an owner");
        assert_eq!(owner.job_id.as_deref(), Some("777001"));
        assert_eq!(owner.job_user.as_deref(), Some("slurm-tester"));
        assert_eq!(owner.job_partition.as_deref(), Some("debug"));
        assert_eq!(owner.labels, BTreeMap::from([("EXPERIMENT_ID".to_string(), "exp-real-1".to_string())]));
        // The user is the one running this test, by name where /etc/passwd has it.
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let uid = parse_status_uid(&status).unwrap();
        let name = parse_passwd(&std::fs::read_to_string("/etc/passwd").unwrap_or_default())
            .get(&uid)
            .cloned()
            .unwrap_or_else(|| uid.to_string());
        assert_eq!(owner.user.as_deref(), Some(name.as_str()));
        assert_eq!(info.user, owner.user);
        // Whatever cgroup this machine puts the child in, it is not a pod.
        assert_eq!(owner.pod_uid, None);
        assert!(info.command.as_deref().is_some_and(|c| c.starts_with("sleep")));
    }
}
