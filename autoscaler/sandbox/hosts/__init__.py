"""Host plumbing: network namespaces, the node image, booted SSH test hosts, GPU nodes,
first boot, and starting/stopping processes by PID."""
