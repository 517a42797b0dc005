//! Who a GPU process belongs to, in words (docs/OWNERS.md): the user, the Kubernetes pod or the
//! Slurm job, the container. Unknown is left out, never guessed.

use fleetlens_api::GpuProcess;

/// The process's user: its pod's declared owner (Kubernetes metadata), else the owner's user,
/// else the process's `user` (older agents), else the Slurm job user.
pub fn user(p: &GpuProcess) -> Option<String> {
    let o = p.owner.as_ref();
    o.and_then(|o| o.pod_user.clone())
        .or_else(|| o.and_then(|o| o.user.clone()))
        .or_else(|| p.user.clone())
        .or_else(|| o.and_then(|o| o.job_user.clone()))
        .filter(|u| !u.is_empty())
}

/// `namespace/pod`, the pod name alone, else `pod <uid prefix>`.
pub fn pod(p: &GpuProcess) -> Option<String> {
    let o = p.owner.as_ref()?;
    match (&o.namespace, &o.pod_name, &o.pod_uid) {
        (Some(ns), Some(name), _) => Some(format!("{ns}/{name}")),
        (None, Some(name), _) => Some(name.clone()),
        (_, None, Some(uid)) => Some(format!("pod {}", uid.chars().take(8).collect::<String>())),
        _ => None,
    }
}

/// The job: a Slurm job `job 4242`, with its partition where known; a Kubernetes job with its
/// kind, `JobSet ml/llm-pretrain`.
pub fn job(p: &GpuProcess) -> Option<String> {
    let o = p.owner.as_ref()?;
    let id = o.job_id.as_ref()?;
    Some(match (&o.job_kind, &o.job_partition) {
        (Some(kind), _) => format!("{kind} {id}"),
        (None, Some(part)) => format!("job {id} ({part})"),
        (None, None) => format!("job {id}"),
    })
}

/// The container id without its runtime prefix, shortened to 12 characters (as `docker ps`).
pub fn container_short(p: &GpuProcess) -> Option<String> {
    let full = container_full(p)?;
    let id = full.rsplit("://").next().unwrap_or(&full);
    Some(id.chars().take(12).collect())
}

/// The container id as the agent sent it.
pub fn container_full(p: &GpuProcess) -> Option<String> {
    p.owner.as_ref().and_then(|o| o.container_id.clone()).or_else(|| p.container_id.clone())
}

/// One process's owner, compact: `alice · ml/nb-alice`, `bob · job 40001 (gpu)`, `alice`;
/// None when nothing is known.
pub fn label(p: &GpuProcess) -> Option<String> {
    let parts: Vec<String> = [user(p), pod(p).or_else(|| job(p))].into_iter().flatten().collect();
    (!parts.is_empty()).then(|| parts.join(" · "))
}

/// The distinct owners of a GPU's processes, in process order: `alice · ml/nb-alice, bob`;
/// None when no process has a known owner.
pub fn summary(processes: &[GpuProcess]) -> Option<String> {
    let mut seen: Vec<String> = Vec::new();
    for l in processes.iter().filter_map(label) {
        if !seen.contains(&l) {
            seen.push(l);
        }
    }
    match seen.len() {
        0 => None,
        1..=2 => Some(seen.join(", ")),
        n => Some(format!("{}, {} +{} more", seen[0], seen[1], n - 2)),
    }
}
