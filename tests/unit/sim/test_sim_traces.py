"""Trace loaders: the shipped files load with the documented contents; bad files fail naming line, column, fix."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from phalanx.sim.traces import (
    ItpJob,
    OpenbNode,
    TraceError,
    load_itp_jobs,
    load_openb_nodes,
    load_openb_pods,
)

ITP_HEADER = "job_id,submission_time,duration,num_gpu"
NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"
POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
)


def write(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_the_shipped_itp_traces_load_with_their_documented_gang_sizes(traces: Path) -> None:
    cluster03 = load_itp_jobs(traces / "itp_cluster03.csv")
    cluster10 = load_itp_jobs(traces / "itp_cluster10.csv")
    assert len(cluster03) == 3011
    assert Counter(job.num_gpu for job in cluster03) == {1: 1014, 2: 85, 8: 1777, 16: 94, 32: 24, 64: 17}
    assert len(cluster10) == 260
    assert cluster03[0] == ItpJob("0bc6e292-b9b4-36d3-61bf-fb714fe2f053", 911907.0, 709.0, 32)


def test_the_shipped_openb_lists_load(traces: Path) -> None:
    nodes = load_openb_nodes(traces / "openb_node_list_gpu_node.csv")
    pods = load_openb_pods(traces / "openb_pod_list_default.csv")
    assert len(nodes) == 1213
    assert sum(node.gpus for node in nodes) == 6212
    assert nodes[0] == OpenbNode("openb-node-0000", 64000, 262144, 2, "P100")
    assert len(pods) == 8152
    assert sum(1 for pod in pods if pod.num_gpu == 0) == 1088
    assert sum(1 for pod in pods if pod.num_gpu == 1 and pod.gpu_milli < 1000) == 3078
    pending = [pod for pod in pods if pod.scheduled_time is None]
    assert len(pending) == 897


def test_any_file_of_the_format_loads_extra_columns_blank_lines_and_column_order_included(tmp_path: Path) -> None:
    path = write(tmp_path, "num_gpu,note,duration,job_id,submission_time", "8,x,60.5,a,0", "", "1,y,10,b,3.25")
    assert load_itp_jobs(path) == (ItpJob("a", 0.0, 60.5, 8), ItpJob("b", 3.25, 10.0, 1))


def test_an_openb_pod_row_becomes_a_typed_record(tmp_path: Path) -> None:
    path = write(
        tmp_path, POD_HEADER, "p0,6000,12288,1,460,V100M16|V100M32,LS,Running,5,100,", "p1,1000,512,0,0,,BE,,0,,"
    )
    shared, cpu_only = load_openb_pods(path)
    assert (shared.num_gpu, shared.gpu_milli, shared.gpu_spec) == (1, 460, ("V100M16", "V100M32"))
    assert (shared.deletion_time, shared.scheduled_time) == (100.0, None)
    assert (cpu_only.num_gpu, cpu_only.gpu_milli, cpu_only.gpu_spec, cpu_only.deletion_time) == (0, 0, (), None)


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        pytest.param([], "the file is empty", id="empty-file"),
        pytest.param(
            ["job_id,submission_time,num_gpu", "a,0,1"],
            "trace.csv:1: the header lacks column(s) 'duration'",
            id="missing-column",
        ),
        pytest.param(
            [ITP_HEADER, "a,0,60,1", "b,soon,60,1"],
            "trace.csv:3: column 'submission_time': 'soon' is not a number",
            id="not-a-number",
        ),
        pytest.param(
            [ITP_HEADER, "a,0,-5,1"], "trace.csv:2: column 'duration': '-5' is below 0", id="negative-duration"
        ),
        pytest.param([ITP_HEADER, "a,0,60,1.5"], "column 'num_gpu': '1.5' is not a whole number", id="fractional-gpus"),
        pytest.param([ITP_HEADER, "a,0,60,-1"], "column 'num_gpu': '-1' is out of range", id="negative-gpus"),
        pytest.param([ITP_HEADER, "a,0,inf,1"], "column 'duration': 'inf' is not a finite number", id="infinite"),
        pytest.param([ITP_HEADER, ",0,60,1"], "trace.csv:2: column 'job_id': is empty", id="empty-id"),
        pytest.param(
            [ITP_HEADER, "a,0,60"], "trace.csv:2: the row has 3 field(s) but the header has 4", id="short-row"
        ),
        pytest.param(
            [ITP_HEADER, "a,0,60,1", "a,5,60,2"],
            "trace.csv:3: column 'job_id': job id 'a' already appears on line 2",
            id="duplicate-id",
        ),
    ],
)
def test_bad_itp_files_name_the_line_column_and_fix(tmp_path: Path, lines: list[str], message: str) -> None:
    path = tmp_path / "trace.csv"
    path.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(TraceError) as caught:
        load_itp_jobs(path)
    assert message in str(caught.value)
    assert str(path) in str(caught.value)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        pytest.param("p,1000,512,2,500,,LS,Running,0,,", "only one-GPU pods may share a GPU", id="shared-multi-gpu"),
        pytest.param("p,1000,512,1,0,,LS,Running,0,,", "write 1000 for whole GPUs", id="zero-share"),
        pytest.param(
            "p,1000,512,1,1001,,LS,Running,0,,",
            "'1001' is out of range; it must be from 0 to 1000",
            id="share-above-1000",
        ),
        pytest.param("p,1000,512,1,1000,,LS,Running,,,", "column 'creation_time': is empty", id="no-creation-time"),
    ],
)
def test_bad_openb_pod_rows_are_refused(tmp_path: Path, row: str, message: str) -> None:
    with pytest.raises(TraceError, match=r"trace\.csv:2") as caught:
        load_openb_pods(write(tmp_path, POD_HEADER, row))
    assert message in str(caught.value)


def test_an_openb_node_list_needs_unique_names_and_a_model_for_gpu_nodes(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="node name 'n0' already appears on line 2"):
        load_openb_nodes(write(tmp_path, NODE_HEADER, "n0,1000,1024,0,", "n0,1000,1024,0,"))
    with pytest.raises(TraceError, match=r"trace\.csv:2: column 'model': is empty"):
        load_openb_nodes(write(tmp_path, NODE_HEADER, "n0,1000,1024,2,"))
    assert load_openb_nodes(write(tmp_path, NODE_HEADER, "cpu-only,8000,1024,0,")) == (
        OpenbNode("cpu-only", 8000, 1024, 0, ""),
    )


def test_a_missing_or_binary_file_is_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such file; check the path of the ITP job trace"):
        load_itp_jobs(tmp_path / "nowhere.csv")
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\xff\xfe\x00\x01" * 10)
    with pytest.raises(TraceError, match="not UTF-8 text"):
        load_itp_jobs(binary)


def test_an_openb_pod_list_with_only_the_columns_placement_reads_loads(tmp_path: Path) -> None:
    """Issue 19: `phalanx sim fgd` refused a pod list cut down to name,cpu_milli,memory_mib,num_gpu,gpu_milli."""
    path = write(tmp_path, "name,cpu_milli,memory_mib,num_gpu,gpu_milli", "a,2000,4096,1,300", "b,500,512,0,0")
    a, b = load_openb_pods(path)
    assert (a.name, a.cpu_milli, a.memory_mib, a.num_gpu, a.gpu_milli) == ("a", 2000, 4096, 1, 300)
    assert (a.gpu_spec, a.qos, a.pod_phase, a.creation_time, a.deletion_time, a.scheduled_time) == (
        (),
        "",
        "",
        0.0,
        None,
        None,
    )
    assert (b.num_gpu, b.gpu_milli) == (0, 0)
    trimmed = write(tmp_path, "name,cpu_milli,memory_mib,num_gpu", "a,2000,4096,1")
    with pytest.raises(TraceError) as refused:
        load_openb_pods(trimmed)
    message = str(refused.value)
    assert "the header lacks column(s) 'gpu_milli'" in message
    assert "has the columns name,cpu_milli,memory_mib,num_gpu,gpu_milli (and may have gpu_spec," in message
