"""A report page that cannot be written whole leaves no partial page behind.

``write_report`` used to write straight to the page's name: a disk filling up part-way left a
truncated HTML file there (and overwrote a whole page of that name with it). The file-size
limit (``RLIMIT_FSIZE``, ``SIGXFSZ`` ignored so a write past it fails with ``EFBIG``) plays
the full disk, in a child process so this one's limits stay as they are.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

FULL_DISK = """
    import errno, json, os, resource, signal, sys
    from connectors.report import write_report

    directory = sys.argv[1]
    kept = os.path.join(directory, "kept.html")
    write_report(kept, "<html>an older page</html>")  # written before the disk filled up
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
    errors = []
    for name in ("kept.html", "new.html"):
        try:
            write_report(os.path.join(directory, name), "<html>" + "x" * 65536 + "</html>")
        except OSError as error:
            errors.append(errno.errorcode[error.errno])
    small = write_report(os.path.join(directory, "small.html"), "<html>fits</html>")
    print(json.dumps({"errors": errors, "small": str(small)}))
"""


def test_a_page_failing_on_a_full_disk_leaves_no_truncated_file(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(FULL_DISK), str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parents[2],
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)

    assert result["errors"] == ["EFBIG", "EFBIG"]  # each failure is still an OSError
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.html", "small.html"]
    assert (tmp_path / "kept.html").read_text() == "<html>an older page</html>"
    assert result["small"] == str(tmp_path / "small.html")
    assert (tmp_path / "small.html").read_text() == "<html>fits</html>"
