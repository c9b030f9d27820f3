"""The web dashboard in a real browser: Debian's chromium, driven by Playwright, over a real `phalanx server`.

The control plane and the server are real processes over one state directory, with jobs in several phases (one
Succeeded with metrics, one Failed, one Running on a GPU, one Queued behind its queue's quota, one in another
namespace). The browser logs in (a wrong token first: the page says the server refused it), then goes through the
jobs list and its filters, a waiting job's and a running job's pages, the queues and nodes pages, and what each
page shows is checked against what the API answers. Releasing the running job changes phases that the open jobs
list shows without a reload. A second server with --no-auth shows the jobs without asking for a token.

Screenshots go to ``$PHALANX_SCREENSHOTS`` when set (docs/dashboard.md's: see there), else to the test's
temporary directory.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx

try:
    from playwright.sync_api import Page, expect
except ImportError:  # failed, never skipped: the browser tests are part of the gate
    raise ImportError("the playwright package is missing: pip install -e '.[test]'") from None

from test_rest_server_e2e import make_token, start_server

from conftest import REPO, Runtime, generic_job, program_role, typed_job, wait_until
from support.browser import screenshot, screenshot_directory, system_chromium

API = "/apis/phalanx.dev/v1alpha1"
INVENTORY = REPO / "examples" / "inventories" / "dgx-2socket-8gpu.yaml"
METRICS = (
    "import json, os; print('evaluated 1000 images', flush=True); "
    "out = os.environ['PHALANX_OUTPUT_DIR']; os.makedirs(out, exist_ok=True); "
    "json.dump({'accuracy': 0.91, 'loss': 0.25}, open(os.path.join(out, 'metrics.json'), 'w'))"
)
TIMEOUT_MS = 30_000  # the page polls every 2 s; a loaded 2-core machine may take a while to answer


def gpu_job(name: str, hold: Path, queue: str) -> dict[str, Any]:
    role = program_role(1, args=["--hold", str(hold)], cpu=1, memory="1Gi", gpu=1)
    return typed_job(name, "generic", {"worker": role}, scheduling={"queue": queue})


def metrics_job(name: str) -> dict[str, Any]:
    document = generic_job(name)
    document["spec"]["replicas"]["worker"]["template"]["command"] = [sys.executable, "-c", METRICS]
    return document


def talking_job(name: str, cue: Path) -> dict[str, Any]:
    """A job whose replica prints one line, waits until ``cue`` exists, then prints a second and exits."""
    speak = (
        "import pathlib, sys, time; print('step 1 of 2', flush=True); "
        f"cue = pathlib.Path({str(cue)!r})\nwhile not cue.exists(): time.sleep(0.05)\nprint('step 2 of 2', flush=True)"
    )
    document = generic_job(name)
    document["spec"]["replicas"]["worker"]["template"]["command"] = [sys.executable, "-c", speak]
    return document


def phases(http: httpx.Client) -> dict[str, str]:
    """namespace/name -> phase of every job, as the API lists them."""
    items = http.get(f"{API}/trainingjobs").json()["items"]
    return {f"{j['metadata']['namespace']}/{j['metadata']['name']}": j["status"]["phase"] for j in items}


def shown_phases(page: Page) -> dict[str, str]:
    """namespace/name -> phase of the jobs list's rows."""
    rows = page.locator("tr[data-job]")
    return {
        rows.nth(i).get_attribute("data-job") or "": rows.nth(i).locator("[data-phase]").inner_text()
        for i in range(rows.count())
    }


def test_the_dashboard_shows_what_the_api_answers_page_by_page(runtime: Runtime, tmp_path: Path) -> None:
    shots = screenshot_directory(tmp_path / "screenshots")
    runtime.start_control_plane(extra=["--inventory", str(INVENTORY)])
    base = start_server(runtime, tmp_path / "server.log")
    admin = make_token(runtime, "setup", "admin", "*")
    viewer = make_token(runtime, "dashboard", "viewer", "*")
    http = httpx.Client(base_url=base, timeout=10, headers={"Authorization": f"Bearer {admin}"})

    queue = {"kind": "Queue", "metadata": {"name": "team-a"}, "spec": {"quota": {"gpu": 1}}}
    assert http.post(f"{API}/queues", json=queue).status_code == 201
    jobs = f"{API}/namespaces/default/trainingjobs"
    busy = gpu_job("train-resnet", tmp_path / "release", queue="team-a")
    busy["metadata"]["labels"] = {"team": "vision"}
    for path, document in (
        (jobs, metrics_job("evaluate")),
        (jobs, generic_job("broken", args=["--crash-always"])),
        (jobs, busy),
        (f"{API}/namespaces/research/trainingjobs", metrics_job("baseline")),
    ):
        assert http.post(path, json=document).status_code == 201
    wanted = {"default/evaluate": "Succeeded", "default/broken": "Failed", "default/train-resnet": "Running"}
    wanted["research/baseline"] = "Succeeded"
    wait_until(lambda: phases(http) == wanted, timeout=90, message=f"the jobs to reach {wanted}")
    # Submitted once the first holds the queue's one GPU: it waits, and the scheduler says why.
    assert http.post(jobs, json=gpu_job("train-vit", tmp_path / "release", queue="team-a")).status_code == 201
    waiting = wait_until(
        lambda: (job := http.get(f"{jobs}/train-vit").json())["status"].get("reason") == "Waiting" and job,
        timeout=60,
        message="train-vit to wait with the scheduler's reason",
    )
    assert waiting["status"]["phase"] == "Queued"

    with system_chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        script_errors: list[str] = []
        page.on("pageerror", lambda error: script_errors.append(str(error)))
        page.set_default_timeout(TIMEOUT_MS)
        expect.set_options(timeout=TIMEOUT_MS)

        # -- login: none given, then a wrong token, then the viewer's --------------------------------------
        page.goto(f"{base}/ui/")
        expect(page.locator("#login")).to_be_visible()
        page.fill("#token", "phx_not-a-token")
        page.click("#login button")
        expect(page.locator("#login .error")).to_contain_text("The server refused this token")
        screenshot(page, shots / "login.png", runtime.state_dir)
        page.fill("#token", viewer)
        page.click("#login button")

        # -- the jobs list: every job with its phase, as the API lists them; then each filter ----------------
        listed = phases(http)
        expect(page.locator("tr[data-job]")).to_have_count(len(listed))
        wait_until(lambda: shown_phases(page) == listed, timeout=30, message="the jobs list to show the API's phases")
        expect(page.locator("#job-count")).to_have_text(f"{len(listed)} of {len(listed)} jobs")
        # Live by the watch route where the server serves one (an event stream), else by polling the list.
        with http.stream("GET", f"{API}/trainingjobs", params={"watch": "true"}) as watched:
            streams = watched.headers["content-type"].startswith("text/event-stream")
        expect(page.locator("body")).to_have_attribute("data-live", "watch" if streams else "poll")
        screenshot(page, shots / "jobs.png", runtime.state_dir)
        page.select_option("select[name=phase]", "Failed")
        expect(page.locator("tr[data-job]")).to_have_count(1)
        expect(page.locator("tr[data-job]")).to_have_attribute("data-job", "default/broken")
        page.select_option("select[name=phase]", "")
        page.select_option("select[name=queue]", "team-a")
        expect(page.locator("tr[data-job]")).to_have_count(2)
        page.select_option("select[name=queue]", "")
        page.fill("input[name=label]", "team=vision")
        page.press("input[name=label]", "Enter")
        expect(page.locator("tr[data-job]")).to_have_count(1)
        expect(page.locator("tr[data-job]")).to_have_attribute("data-job", "default/train-resnet")
        page.fill("input[name=label]", "")
        page.press("input[name=label]", "Enter")
        page.fill("input[name=namespace]", "research")
        page.press("input[name=namespace]", "Enter")
        expect(page.locator("tr[data-job]")).to_have_count(1)
        expect(page.locator("tr[data-job]")).to_have_attribute("data-job", "research/baseline")
        page.fill("input[name=namespace]", "")
        page.press("input[name=namespace]", "Enter")
        expect(page.locator("tr[data-job]")).to_have_count(len(listed))

        # -- a waiting job: why it waits, in the scheduler's words ---------------------------------------------
        page.click("tr[data-job='default/train-vit'] a")
        expect(page.locator("h1 [data-phase]")).to_have_text("Queued")
        explain = http.get(f"{jobs}/train-vit/explain")
        sentence = explain.json()["message"] if explain.status_code == 200 else waiting["status"]["message"]
        expect(page.locator("#explain-text")).to_have_text(sentence)
        expect(page.locator("#no-placement")).to_be_visible()
        screenshot(page, shots / "job-waiting.png", runtime.state_dir, full_page=True)

        # -- a running job: its placement, as the API has it; a finished one: its metrics chart ------------------
        page.goto(f"{base}/ui/#/jobs/default/train-resnet")
        running = http.get(f"{jobs}/train-resnet").json()
        [(replica, where)] = running["status"]["placements"].items()
        row = page.locator(f"tr[data-replica='{replica}']")
        expect(row.locator(".node")).to_have_text(where["node"])
        expect(row.locator(".gpus")).to_have_text(", ".join(str(g) for g in where["gpus"]))
        expect(page.locator("#explain")).to_be_hidden()
        screenshot(page, shots / "job-running.png", runtime.state_dir, full_page=True)

        page.goto(f"{base}/ui/#/jobs/default/evaluate")
        metrics = http.get(f"{jobs}/evaluate").json()["status"]["metrics"]
        assert metrics == {"accuracy": 0.91, "loss": 0.25}
        chart = page.locator("[data-testid=metrics-chart]")
        for name, value in metrics.items():
            expect(chart.locator(f"g[data-label='{name}']")).to_have_attribute("data-value", str(value))
        events = http.get(f"{jobs}/evaluate/events")
        # The timeline shows the job's events where the server serves them, else the steps of its status.
        steps = {e["reason"] for e in events.json()["items"]} if events.status_code == 200 else {"Created", "Succeeded"}
        for step in steps:
            expect(page.locator(f"[data-testid=timeline] g[data-step='{step}']").first).to_be_visible()
        log = http.get(f"{jobs}/evaluate/log", params={"replica": "worker-0"})
        if log.status_code == 200:
            assert "evaluated 1000 images" in log.text
            expect(page.locator("#log")).to_contain_text("evaluated 1000 images")
        else:  # the server does not serve logs: the page says what the API said
            expect(page.locator("#log-note")).to_have_text(log.json()["message"])
        screenshot(page, shots / "job-succeeded.png", runtime.state_dir, full_page=True)

        # -- queues: admitted and pending as the Queue's status counts them, and who waits and why -------------
        page.click("nav a[data-nav=queues]")
        stored = http.get(f"{API}/queues/team-a").json()["status"]
        card = page.locator("[data-queue=team-a]")
        expect(card.locator(".admitted")).to_have_text(str(stored["admitted"]))
        expect(card.locator(".pending")).to_have_text(str(stored["pending"]))
        expect(card.locator("tr[data-waiting='default/train-vit'] .why")).to_have_text(waiting["status"]["message"])
        expect(card.locator("[data-testid=usage-team-a] g[data-label=gpu]")).to_have_attribute("data-value", "1")
        screenshot(page, shots / "queues.png", runtime.state_dir, full_page=True)

        # -- nodes: the nodes the API lists, each GPU in the grid, the running job on the GPUs it holds ---------
        page.click("nav a[data-nav=nodes]")
        nodes = http.get(f"{API}/nodes")
        if nodes.status_code == 200:
            items = nodes.json()["items"]
            expect(page.locator("[data-node]")).to_have_count(len(items))
            for node in items:
                grid = page.locator(f"[data-node='{node['metadata']['name']}'] [data-gpu]")
                expect(grid).to_have_count(len(node["status"]["gpus"]))
            held = page.locator(f"[data-node='{where['node']}'] [data-gpu='{where['gpus'][0]}'] .holder")
            expect(held).to_have_text("default/train-resnet")
        else:  # the server does not serve nodes yet: the page shows the API's sentence
            expect(page.locator("#nodes-body .error")).to_have_text(nodes.json()["message"])
        screenshot(page, shots / "nodes.png", runtime.state_dir, full_page=True)

        # -- live: the open jobs list follows phases changed behind it, without a reload -----------------------
        page.click("nav a[data-nav=jobs]")
        expect(page.locator("tr[data-job]")).to_have_count(len(listed))
        (tmp_path / "release").write_text("go")
        finished = page.locator("tr[data-job='default/train-resnet'] [data-phase]")
        expect(finished).to_have_text("Succeeded", timeout=90_000)
        expect(page.locator("tr[data-job='default/train-vit'] [data-phase]")).not_to_have_text("Queued", timeout=90_000)

        # -- live log: a running job's page shows each line as the replica writes it, without a reload ----------
        assert http.post(jobs, json=talking_job("talker", tmp_path / "speak")).status_code == 201
        page.goto(f"{base}/ui/#/jobs/default/talker")
        expect(page.locator("#log")).to_contain_text("step 1 of 2", timeout=60_000)
        expect(page.locator("#log")).to_have_attribute("data-follow", "stream")  # followed, not read again
        expect(page.locator("#log")).not_to_contain_text("step 2 of 2")
        (tmp_path / "speak").write_text("go")
        expect(page.locator("#log")).to_contain_text("step 2 of 2", timeout=60_000)
        expect(page.locator("h1 [data-phase]")).to_have_text("Succeeded", timeout=60_000)
        expect(page.locator("#log")).to_have_attribute("data-follow", "ended")  # the server ends it with the job
        assert http.get(f"{jobs}/talker/log", params={"replica": "worker-0"}).text.splitlines() == [
            "step 1 of 2",
            "step 2 of 2",
        ]

        # -- history: the records the API keeps (read first: the page, read later, may show more) ----------------
        history = http.get(f"{API}/history", params={"limit": 1000})
        page.click("nav a[data-nav=history]")
        if history.status_code == 200:
            answer = history.json()
            for record in answer["items"]:
                expect(page.locator(f"tr[data-record='{record['namespace']}/{record['name']}']").first).to_be_visible()
            for summary in answer["queues"]:
                bars = page.locator("[data-testid=queueing-per-queue]")
                expect(bars.locator(f"g[data-label='{summary['queue']} p50']")).to_have_count(1)
        else:  # the server keeps no history, or does not serve it yet: the page shows the API's sentence
            expect(page.locator("#history-body .error")).to_have_text(history.json()["message"])
        screenshot(page, shots / "history.png", runtime.state_dir, full_page=True)
        assert script_errors == []


TRIAL = "import sys; lr = float(sys.argv[1]); print(f'phalanx-metric step=1 loss={(lr - 0.05) ** 2 + 0.01}')"


def program_spec(*command: str) -> dict[str, Any]:
    template = {"command": [sys.executable, *command], "resources": {"cpu": "100m", "memory": "64Mi"}}
    return {"type": "generic", "replicas": {"worker": {"count": 1, "template": template}}}


def tuned_pipeline() -> dict[str, Any]:
    """A Pipeline whose first step is a Sweep and whose second trains with the best value it found."""
    sweep = {
        "parameters": [{"name": "lr", "type": "discrete", "values": [0.01, 0.05, 0.1]}],
        "algorithm": {"name": "grid"},
        "objective": {"metric": "loss", "direction": "minimize"},
        "maxTrials": 3,
        "parallelTrials": 2,
        "trial": {"spec": program_spec("-c", TRIAL, "${params.lr}")},
    }
    final = {
        "name": "final",
        "trainingJob": {"spec": program_spec("-c", "import sys; print(sys.argv[1])", "${inputs.lr}")},
        "arguments": {"lr": "{{steps.tune.outputs.lr}}"},
    }
    steps = [{"name": "tune", "sweep": {"spec": sweep}, "outputs": [{"name": "lr", "type": "Float"}]}, final]
    return {"kind": "Pipeline", "metadata": {"name": "tuned"}, "spec": {"steps": steps}}


def test_without_auth_the_sweeps_pipelines_and_datasets_pages_show_what_the_api_answers(
    runtime: Runtime, tmp_path: Path
) -> None:
    shots = screenshot_directory(tmp_path / "screenshots")
    runtime.start_control_plane()
    base = start_server(runtime, tmp_path / "server.log", "--no-auth")
    http = httpx.Client(base_url=base, timeout=10)
    data = tmp_path / "images"
    data.mkdir()
    (data / "a.bin").write_bytes(b"a" * 3000)
    namespace = f"{API}/namespaces/default"
    dataset = {"kind": "Dataset", "metadata": {"name": "images"}, "spec": {"source": {"path": str(data)}}}
    assert http.post(f"{namespace}/datasets", json=dataset).status_code == 201
    assert http.post(f"{namespace}/pipelines", json=tuned_pipeline()).status_code == 201
    run = {"kind": "PipelineRun", "metadata": {"name": "tuned-1"}, "spec": {"pipelineRef": {"name": "tuned"}}}
    assert http.post(f"{namespace}/pipelineruns", json=run).status_code == 201

    def finished() -> dict[str, Any] | None:
        found: dict[str, Any] = http.get(f"{namespace}/pipelineruns/tuned-1").json()
        return found if found.get("status", {}).get("phase") in ("Succeeded", "Failed") else None

    done = wait_until(finished, timeout=180, message="pipelinerun tuned-1 to finish")
    assert done["status"]["phase"] == "Succeeded", done["status"]

    with system_chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        script_errors: list[str] = []
        page.on("pageerror", lambda error: script_errors.append(str(error)))
        page.set_default_timeout(TIMEOUT_MS)
        expect.set_options(timeout=TIMEOUT_MS)
        page.goto(f"{base}/")  # the root leads to the dashboard; no token is asked for
        listed = phases(http)
        expect(page.locator("tr[data-job]")).to_have_count(len(listed))
        expect(page.locator("#login")).to_have_count(0)
        expect(page.locator("#logout")).to_be_hidden()

        # -- the pipeline run: its DAG, each step in the state the run's status gives it ------------------------
        page.click("nav a[data-nav=pipelineruns]")
        graph = page.locator("[data-testid=dag-tuned-1]")
        for instance in done["status"]["instances"]:
            step = graph.locator(f"g[data-node='{instance['step']}']")
            expect(step).to_have_attribute("data-state", instance["phase"])
        expect(graph.locator("line[data-edge='tune->final']")).to_have_count(1)
        screenshot(page, shots / "pipelines.png", runtime.state_dir, full_page=True)

        # -- the sweep its first step ran: every trial and the best -------------------------------------------
        page.click("nav a[data-nav=sweeps]")
        [sweep] = http.get(f"{namespace}/sweeps").json()["items"]
        card = page.locator(f"[data-sweep='default/{sweep['metadata']['name']}']")
        results = sweep["status"]["results"]
        expect(card.locator("tr[data-trial]")).to_have_count(len(results))
        for result in results:
            phase = card.locator(f"tr[data-trial='{result['number']}'] .trial-phase")
            expect(phase).to_have_text(result["phase"])
        best = str(sweep["status"]["bestTrial"]["number"])
        expect(card.locator("dd.best")).to_have_attribute("data-best", best)
        expect(card.locator("tr.best")).to_have_attribute("data-trial", best)
        screenshot(page, shots / "sweeps.png", runtime.state_dir, full_page=True)

        # -- datasets: phase, size and the nodes caching it, as the API has them -----------------------------
        page.click("nav a[data-nav=datasets]")
        stored = http.get(f"{namespace}/datasets/images").json()["status"]
        row = page.locator("tr[data-dataset='default/images']")
        expect(row.locator(".phase-cell")).to_have_text(stored.get("phase", "Pending"))
        expect(row.locator(".files")).to_have_text(str(stored.get("files", 0)))
        expect(row.locator(".nodes")).to_have_text(", ".join(stored.get("nodes", [])) or "none")
        nodes = http.get(f"{API}/nodes")
        if nodes.status_code != 200:  # the server does not serve nodes (nor their caches) yet: the page says so
            expect(page.locator("#caches-note")).to_contain_text(nodes.json()["message"])
        else:
            expect(page.locator("[data-cache-node]")).to_have_count(len(nodes.json()["items"]))
            for node in nodes.json()["items"]:
                name = node["metadata"]["name"]
                cache = http.get(f"{API}/nodes/{name}/caches").json()
                entries = page.locator(f"[data-cache-node='{name}'] tr[data-entry]")
                expect(entries).to_have_count(len(cache["entries"]))
        screenshot(page, shots / "datasets.png", runtime.state_dir, full_page=True)
        assert script_errors == []
