"""What a stopped instance costs: its root volume only (EC2 bills no instance-hours while an
instance is stopped; the EBS volume stays billed), as a warm pool keeps it.

EBS gp3 in us-east-1: $0.08 per GB-month (aws.amazon.com/ebs/pricing, read 2026-12-04);
AWS prices a GB-month as 730 hours. The root volume is the pool module's ``root_volume_gb``
default (terraform/modules/aws-gpu-pool/variables.tf: 100 GiB, room for the driver, CUDA
and container images).
"""

from __future__ import annotations

GP3_USD_PER_GB_MONTH = 0.08
HOURS_PER_MONTH = 730.0
ROOT_VOLUME_GB = 100


def stopped_hourly_usd(volume_gb: int = ROOT_VOLUME_GB) -> float:
    """$/h of a stopped instance with a ``volume_gb`` root volume, whatever its type (the
    volume's size is the pool module's, not the type's): $0.011 for 100 GB."""
    return volume_gb * GP3_USD_PER_GB_MONTH / HOURS_PER_MONTH
