from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from autoscaler.traces import DAY, TraceError, load_duty_cycles, load_pod_list
from tests.shared_data import SHARED_DATA
from tests.sim.conftest import pod, write_pods


def test_window_selects_gpu_pods_and_documents_every_skip(pods_csv: Path) -> None:
    wl = load_pod_list(pods_csv, start_day=3, days=1)
    by_id = {j.id: j for j in wl.jobs}
    assert sorted(by_id) == ["early-long", "eight", "share", "spec"]
    assert (wl.start, wl.end) == (3 * DAY, 4 * DAY)
    assert wl.stats.cpu_only == 1
    assert wl.stats.never_scheduled == 1
    assert wl.stats.zero_length == 1
    assert wl.stats.outside_window == 2  # early-done ended before, late arrives after
    assert wl.stats.carried == 1


def test_duration_share_and_spec_follow_the_v2023_columns(pods_csv: Path) -> None:
    jobs = {j.id: j for j in load_pod_list(pods_csv, start_day=3, days=1).jobs}
    share = jobs["share"]
    assert share.arrival == 3 * DAY + 60  # creation_time, not scheduled_time
    assert share.duration == 600  # deletion - scheduled
    assert share.gpus == pytest.approx(0.46)
    assert share.whole_gpus == 0
    assert jobs["eight"].gpus == 8 and jobs["eight"].whole_gpus == 8
    assert jobs["spec"].gpu_spec == ("V100M16", "V100M32")


def test_carried_job_arrives_at_window_start_with_the_time_it_had_left(pods_csv: Path) -> None:
    jobs = {j.id: j for j in load_pod_list(pods_csv, start_day=3, days=1).jobs}
    early = jobs["early-long"]
    assert early.carried
    assert early.arrival == 3 * DAY
    assert early.duration == 500


def test_whole_trace_by_default_and_window_clipped_at_trace_end(pods_csv: Path) -> None:
    wl = load_pod_list(pods_csv)
    assert wl.start == 0 and wl.end == 4 * DAY + 100  # the last deletion_time
    assert len(wl.jobs) == 6
    assert load_pod_list(pods_csv, start_day=3, days=50).end == 4 * DAY + 100


def test_demand_gpu_hours_clip_at_window_end(tmp_path: Path) -> None:
    path = write_pods(tmp_path / "p.csv", [pod("a", 0, 0, 7200, milli=500), pod("b", 0, 0, 100 * 3600)])
    wl = load_pod_list(path, 0, 1)
    assert wl.demand_gpu_hours() == pytest.approx(0.5 * 2 + 1 * 24)


def test_missing_column_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("name,num_gpu\nx,1\n")
    with pytest.raises(TraceError, match=r"bad\.csv: missing column\(s\) gpu_milli"):
        load_pod_list(path)


def test_bad_number_names_file_and_line(tmp_path: Path) -> None:
    path = write_pods(tmp_path / "p.csv", [pod("a", 0, 0, 10), pod("b", "soon", 0, 10)])
    with pytest.raises(TraceError, match=r"p\.csv:3: column creation_time: 'soon' is not a number"):
        load_pod_list(path)


def test_window_after_the_trace_is_refused(pods_csv: Path) -> None:
    with pytest.raises(TraceError, match="after the trace ends"):
        load_pod_list(pods_csv, start_day=30)


def test_missing_file_is_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot read"):
        load_pod_list(tmp_path / "nope.csv")


def _duty_rows() -> str:
    rows = ["value,timestamp_anon,container_ip"]
    for i in range(12):
        rows.append(f"{10 * i},{1000 + 60 * i},aaa")
        rows.append(f"{150 if i == 0 else 5},{1000 + 60 * i},bbb")
    rows.append("50,1000,short")  # too few samples: dropped
    return "\n".join(rows) + "\n"


def test_duty_cycles_per_container_sorted_clamped_and_gz(tmp_path: Path) -> None:
    path = tmp_path / "duty.csv.gz"
    with gzip.open(path, "wt") as fh:
        fh.write(_duty_rows())
    duty = load_duty_cycles(path)
    assert len(duty) == 2
    assert duty.step == 60
    assert duty.series[0] == tuple(min(100.0, 10.0 * i) for i in range(12))
    assert duty.series[1][0] == 100.0  # clamped to 100 %
    plain = tmp_path / "duty.csv"
    plain.write_text(_duty_rows())
    assert load_duty_cycles(plain) == duty


def test_duty_cycles_need_enough_samples(tmp_path: Path) -> None:
    path = tmp_path / "duty.csv"
    path.write_text("value,timestamp_anon,container_ip\n1,1,a\n")
    with pytest.raises(TraceError, match="no container has at least"):
        load_duty_cycles(path)


FIXTURE = SHARED_DATA / "fixtures/openb_default_day148.csv"


@pytest.mark.skipif(not FIXTURE.exists(), reason="shared trace fixtures not present")
def test_real_day_slice_loads() -> None:
    wl = load_pod_list(FIXTURE, start_day=148, days=1)
    assert len(wl.jobs) > 500
    assert all(j.gpus > 0 and j.duration > 0 for j in wl.jobs)
    assert any(j.gpus < 1 for j in wl.jobs)
