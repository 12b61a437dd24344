"""Set-up mistakes a newcomer makes, as they make them on the command line: a time zone that
does not exist, a state_dir that is a file, a second daemon started on the same state, a
repo path written relative to the config, a unit directory that cannot be written, a repo
naming a "model" that is a CLI option. Each is one line naming the problem (exit 2 where
nothing can start), never a traceback, and nothing already running is disturbed."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from gateway_bot.cli import main
from gateway_bot.config.repo import parse_repo_config
from gateway_bot.config.server import load_server_config
from gateway_bot.config.yaml_tags import ConfigError
from tests.conftest import write_config
from tests.support.fake_anthropic import FakeAnthropic


def test_an_unknown_time_zone_is_a_config_error_not_a_failure_of_every_task(
    tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, target_repo, fake_api, timezone="Mars/Olympus")
    # It used to check OK; then every message ended in "Internal error: 'No time zone
    # found with key Mars/Olympus'".
    assert main(["check", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "timezone: Value error, unknown time zone 'Mars/Olympus'" in err
    assert "Traceback" not in err


def test_a_state_dir_that_is_a_file_is_one_line_for_check_and_run(
    tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, capsys: pytest.CaptureFixture[str]
) -> None:
    in_the_way = tmp_path / "state-file"
    in_the_way.write_text("not a directory\n")
    config = write_config(tmp_path, target_repo, fake_api, state_dir=str(in_the_way))
    problem = (
        f"The state directory {in_the_way} cannot be used: a file (or a path through a "
        "file) is in the way (state_dir in the config)."
    )
    assert main(["check", "--config", str(config)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"{config}: {problem}"]
    # migrate and approve used to end in tracebacks too.
    assert main(["migrate", "--config", str(config)]) == 1
    assert capsys.readouterr().err.startswith(
        f"cannot open the state database {in_the_way}/state.db: [Errno 17] File exists"
    )
    assert main(["approve", "0123abcd", "--as", "owner", "--config", str(config)]) == 4
    assert capsys.readouterr().err.startswith("The daemon is not running (no daemon answers at")
    # `run` used to end in a FileExistsError traceback from the store's start.
    assert main(["run", "--config", str(config)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [problem]
    assert in_the_way.read_text() == "not a directory\n"


def _lock_holder(state_dir: Path, within_s: float = 60.0) -> int:
    deadline = time.monotonic() + within_s
    lock = state_dir / "daemon.lock"
    while time.monotonic() < deadline:
        if lock.exists() and (text := lock.read_text().strip()):
            return int(text)
        time.sleep(0.1)
    raise AssertionError(f"no daemon took {lock} within {within_s} s")


def test_a_second_daemon_on_the_same_state_dir_is_refused_and_the_first_keeps_serving(
    gateway,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = write_config(tmp_path, target_repo, fake_api)
    state_dir = tmp_path / "state"
    first = gateway("run", "--config", str(config))
    assert _lock_holder(state_dir) == first.process.pid
    # Without the lock a second `run` (or a `chat` on that config) started as well: both
    # listened on every channel and ran the same conversations.
    assert main(["run", "--config", str(config)]) == 2  # refused before anything starts
    assert capsys.readouterr().err.strip().splitlines() == [
        f"Another gateway-bot (pid {first.process.pid}) already serves the state "
        f"directory {state_dir}: stop it first, or give this config its own state_dir "
        "(ha.enabled lets several daemons share one)."
    ]
    assert first.process.poll() is None, first.stderr
    assert _lock_holder(state_dir) == first.process.pid


def test_a_link_planted_at_the_lock_is_not_followed_and_is_one_line(
    tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, target_repo, fake_api)
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    lock = state_dir / "daemon.lock"
    precious = tmp_path / "precious"
    precious.write_text("someone else's file\n")
    lock.symlink_to(precious)  # the daemon would truncate it and write its pid there
    assert main(["run", "--config", str(config)]) == 2
    # It used to be refused by O_NOFOLLOW too, but as an OSError traceback ("Too many
    # levels of symbolic links") that named neither the file nor what to do.
    assert capsys.readouterr().err.strip().splitlines() == [
        f"The lock file {lock} cannot be used (it is a symbolic link): it must be a plain "
        "file, never a link. Remove whatever is there (gateway-bot makes the file itself) "
        "and start again."
    ]
    assert precious.read_text() == "someone else's file\n"
    assert lock.is_symlink()
    lock.unlink()
    os.mkfifo(lock)  # opening a FIFO must not hang the start either
    assert main(["run", "--config", str(config)]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"The lock file {lock} cannot be used (it is not a regular file)")
    lock.unlink()
    lock.mkdir()
    assert main(["run", "--config", str(config)]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"The lock file {lock} cannot be used (is a directory)")


def test_a_relative_repo_path_is_relative_to_the_config_like_state_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "conf").mkdir()
    config = tmp_path / "conf" / "gateway-bot.yaml"
    config.write_text(
        "state_dir: state\nrepo: {url: ../project}\nsandbox: {kind: none}\n"
        "channels: {console: {}}\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the daemon started from another directory
    loaded = load_server_config(config)
    # It used to stay "../project", cloned relative to wherever the daemon ran:
    # "git clone failed: fatal: repository '../project' does not exist".
    assert loaded.repo.url == str(tmp_path / "project")
    assert loaded.state_dir == tmp_path / "conf" / "state"
    # So are the other files it names (the sample's comment says so of every path).
    config.write_text(
        "repo: {url: /srv/x}\nchannels: {console: {}}\n"
        "sandbox: {image: {containerfile: images/Containerfile}}\n"
        "dashboard: {token: 0123456789abcdef, behind_proxy: true, tls_certificate: c.pem,"
        " tls_key: ../k.pem}\n"
    )
    loaded = load_server_config(config)
    assert loaded.sandbox.image.containerfile == tmp_path / "conf" / "images" / "Containerfile"
    assert loaded.dashboard is not None
    assert loaded.dashboard.tls_certificate == tmp_path / "conf" / "c.pem"
    assert loaded.dashboard.tls_key == tmp_path / "k.pem"
    for url in ("https://example.org/x.git", "git@example.org:x.git", "/srv/x", "~/x"):
        config.write_text(f"repo: {{url: {url!r}}}\nchannels: {{console: {{}}}}\n")
        assert load_server_config(config).repo.url == url
    # check notes the missing local repo (not an error: it may be made before `run`).
    config.write_text("repo: {url: ../project}\nsandbox: {kind: none}\nchannels: {}\n")
    assert main(["check", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert f"note: repo.url {tmp_path / 'project'} is not a directory" in out
    assert "note: no channel is enabled: `run` would refuse to start" in out


def test_image_build_with_a_containerfile_that_cannot_be_read_is_one_line(
    tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, target_repo, fake_api)
    missing = tmp_path / "no-such" / "Containerfile"
    # It used to end in a FileNotFoundError traceback (exit 1).
    assert main(["image", "build", "--config", str(config), "--containerfile", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [f"error: cannot read {missing}: No such file or directory"]


def test_install_service_into_a_directory_it_cannot_make_is_one_line(
    tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, target_repo, fake_api)
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    code = main(["install-service", "--config", str(config), "--unit-dir", str(a_file / "units")])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("install-service: cannot write the unit: ")
    assert len(err.strip().splitlines()) == 1


def test_a_repo_model_that_would_read_as_a_cli_option_is_refused() -> None:
    for hostile in ("--yolo", "-m", "opus --dangerously-skip-permissions", "x" * 200):
        with pytest.raises(ConfigError) as caught:
            parse_repo_config(f"model: {hostile!r}\n")
        assert caught.value.problems[0].startswith("model: String should match pattern")
    assert parse_repo_config("model: claude-opus-4-1\n").model == "claude-opus-4-1"


def test_state_copy_mistakes_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "state.db"
    source.write_text("these are notes, not a database\n")
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    cases = {
        # Onto itself: with --replace it emptied the tables it was about to read.
        (f"sqlite:///{source}", f"sqlite:///{tmp_path}/../{tmp_path.name}/state.db"): (
            "state copy refused: --from and --to are the same database"
        ),
        (f"sqlite:///{source}", f"sqlite:///{tmp_path}/out.db"): (
            "state copy failed: file is not a database"
        ),
        (f"sqlite:///{source}", f"sqlite:///{a_file}/sub/out.db"): "state copy failed: [Errno",
    }
    for (origin, target), said in cases.items():
        assert main(["state", "copy", "--from", origin, "--to", target, "--replace"]) == 1
        err = capsys.readouterr().err
        assert err.startswith(said), err
        assert len(err.strip().splitlines()) == 1, err
    assert source.read_text() == "these are notes, not a database\n"


def test_a_dotenv_that_is_not_utf8_is_named_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "gateway-bot.yaml"
    config.write_text("repo: {url: /srv/x}\nchannels: {console: {}}\nsecrets: {A: !env FOO}\n")
    (tmp_path / ".env").write_bytes(b"FOO=caf\xe9\n")  # saved as Latin-1 by an old editor
    assert main(["check", "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"{tmp_path / '.env'}: the config is not valid:",
        "  cannot read: 'utf-8' codec can't decode byte 0xe9 in position 7: invalid "
        "continuation byte",
    ]


def test_a_dashboard_operator_who_is_no_owner_is_a_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "gateway-bot.yaml"
    base = (
        "repo: {url: /srv/x}\nchannels: {console: {}}\n"
        "dashboard: {token: 0123456789abcdef, operator: {slack: U0ALICE}}\n"
    )
    config.write_text(base + "access: {owners: {slack: [U0BOB]}}\n")
    # It used to check OK; every Allow or Deny on the dashboard was then refused.
    assert main(["check", "--config", str(config)]) == 2
    assert (
        "dashboard.operator.slack: 'U0ALICE' is not an owner or admin of slack (add it to "
        "access.owners.slack or access.admins.slack)"
    ) in capsys.readouterr().err
    config.write_text(base + "access: {admins: {slack: [U0ALICE]}}\n")
    assert load_server_config(config).dashboard is not None


def test_built_in_chat_outside_a_repo_with_a_state_home_that_is_a_file_is_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The first-run command outside a git repo makes its sample repo in the state dir: a
    file there used to end in a traceback from that mkdir before any check ran."""
    in_the_way = tmp_path / "state-home"
    in_the_way.write_text("a file, not a directory\n")
    monkeypatch.setenv("XDG_STATE_HOME", str(in_the_way))
    outside = tmp_path / "not-a-repo"
    outside.mkdir()
    monkeypatch.chdir(outside)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    assert main(["chat"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        f"The state directory {in_the_way}/gateway-bot cannot be used: a file (or a path "
        "through a file) is in the way (state_dir in the config)."
    ]
    assert in_the_way.read_text() == "a file, not a directory\n"


def test_an_empty_state_dir_is_a_config_error_not_the_configs_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "gateway-bot.yaml"
    config.write_text(
        "state_dir: ''\nrepo: {url: /srv/x}\nsandbox: {kind: none}\nchannels: {console: {}}\n"
    )
    # It used to load as the config's own directory: state.db, workspaces and the lock
    # beside the config, with no word said.
    assert main(["check", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "state_dir: Value error, is empty: name a directory (relative to this config " in err
    assert "Traceback" not in err
    assert not (tmp_path / "state.db").exists()
    with pytest.raises(ConfigError):
        load_server_config(config)
    config.write_text("state_dir: .\nrepo: {url: /srv/x}\nchannels: {console: {}}\n")
    assert load_server_config(config).state_dir == tmp_path, "said outright, it is allowed"
