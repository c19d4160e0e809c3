"""Fake API servers and fake GPU tools the sandbox serves at run time (Kubernetes API, ECS,
dcgm-exporter, nvidia-smi, kubeadm) and the threaded HTTP base they share."""
