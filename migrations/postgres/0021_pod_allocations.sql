-- The pods the kubelet allocated each sampled GPU to (PodResources API, agent --kubelet-socket):
-- JSON list of {namespace, pod, container, resource, device_id}; NULL when none was sent. Owner
-- reports and alert owner fields give an allocated GPU with no visible process to its pods.
ALTER TABLE samples ADD COLUMN allocations TEXT;
