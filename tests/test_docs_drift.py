"""Documented output held to what the programs print (issue 32, item 8): docs/using.md's oversubscription
warning (the page said the trainer does not warn about more ranks than cores; it does), and the simulator's
footer, which printed the crossbar's link numbers for presets that use their own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from collectives.virtual_time.network import LINKS
from minidl.simulate.cli import main as simulate
from minidl.tools import threads

ROOT = Path(__file__).resolve().parents[1]


def test_using_md_shows_the_warning_the_trainer_prints_for_more_ranks_than_cores(monkeypatch, capsys):
    page = (ROOT / "docs" / "using.md").read_text()
    block = re.search(r"each at half speed or less, and .*?\n```\n(.*?)```", page, re.S)
    assert block, "docs/using.md: the oversubscription example is gone"
    assert "does not warn" not in page
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 2)
    import threadpoolctl

    monkeypatch.setattr(threadpoolctl, "threadpool_limits", lambda **_: None)  # this process keeps its threads
    assert threads.limit_blas_threads({"MPI_LOCALNRANKS": "4", "PMI_RANK": "0"}) == 1
    out, err = capsys.readouterr()
    assert (err + out).splitlines() == block.group(1).splitlines()


@pytest.mark.parametrize("networks", ["10gbe", "1gbe,ib-edr", "crossbar,25gbe"])
def test_the_simulator_footer_gives_each_network_its_own_link(capsys, networks):
    argv = ["lm", "--profile", "params=1e6,rate=1000,batch=64", "--nodes", "1,4", "--network", networks]
    assert simulate(argv) == 0
    footer = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("  network "))
    for name in networks.split(","):
        if name == "crossbar":
            assert "crossbar links: alpha 5.00 us, beta 0.3000 ns/B" in footer
            continue
        link = LINKS[name]
        own = f"{name} links: alpha {1e6 * link.alpha:.3g} us, {link.bandwidth / 1e9:.3g} GB/s (the preset's own)"
        assert own in footer, footer
    assert ("crossbar" in footer) == ("crossbar" in networks), footer
