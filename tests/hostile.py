"""Hostile strings a team (or a compromised cloud answer) could put where a name belongs.

Each would run code, read files or add arguments if any layer treated data as code: a
Jinja2 template that runs a command on the Ansible controller, Terraform template
interpolation and directives, and a space that splits one argument into two. Tests push
them past validation (``model_construct``, ``model_copy``) to prove the actuators' own
defence, and through validation to prove the schema refuses them.
"""

from __future__ import annotations

from pathlib import Path

MARKER_DIR = Path("/tmp")


def pwned(tag: str) -> Path:
    """The file a successful injection would create (each test uses its own tag)."""
    return MARKER_DIR / f"gpu-autoscaler-PWNED-{tag}"


def jinja(tag: str) -> str:
    return "{{ lookup('pipe', 'touch " + str(pwned(tag)) + "') }}"


def jinja_block(tag: str) -> str:
    return "{% set x = lookup('pipe', 'touch " + str(pwned(tag)) + "') %}x"


TF_FILE = '${file("/etc/passwd")}'
TF_DIRECTIVE = "%{ if true }evaluated%{ endif }"
SPLIT = "gpu state=resume"
PASSWD_LINE = "root:x:0:0"
