"""The README's example of a recorded stream is a recording as it stands: copied into a file,
every line is an event the planner accepts, and the closing clock event makes it tick."""

from __future__ import annotations

from pathlib import Path

from tests.flow.runner import flowplanner, read_jsonl

ROOT = Path(__file__).resolve().parents[2]


def readme_events() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("```json\n", text.index("One event per line")) + len("```json\n")
    return text[start : text.index("```\n", start)]


def test_the_readme_event_example_is_accepted_line_by_line(tmp_path: Path) -> None:
    recording = tmp_path / "readme.jsonl"
    recording.write_text(readme_events())
    lines = recording.read_text().splitlines()
    dead, ticks = tmp_path / "dead.jsonl", tmp_path / "ticks.jsonl"

    done = flowplanner(
        "run",
        *("--config", str(ROOT / "examples" / "decode.yaml"), "--input", str(recording)),
        *("--dead-letters", str(dead), "--ticks", str(ticks)),
    )

    assert done.returncode == 0, done.stderr
    assert f"{len(lines)} events in, 0 dead-lettered" in done.stderr + done.stdout
    assert not dead.exists() or read_jsonl(dead) == []
    assert [t["time"] for t in read_jsonl(ticks)] == [5.0]
