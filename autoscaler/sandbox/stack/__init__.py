"""Stack orchestration: the whole local stack (``local.SandboxStack``), its config and
state files, the supervisor, the moto-instance follower and the demo."""
