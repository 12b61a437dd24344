"""A newcomer's first steps, through the real ``gateway-bot`` CLI (and the real Claude Code
CLI in host mode against the fake model API): ``--help``, ``check`` without a config, a
first message with a key the API refuses, a repo that cannot be cloned."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway_bot.cli import check as check_command
from gateway_bot.cli import config_source as cli_config
from gateway_bot.cli import main
from gateway_bot.config.repo import parse_repo_config
from gateway_bot.config.server import load_server_config
from gateway_bot.config.yaml_tags import ConfigError
from tests.conftest import gateway_env, make_repo, write_config
from tests.support.fake_anthropic import FakeAnthropic


def test_a_key_the_model_api_refuses_is_one_clear_line_not_minutes_of_silence(
    gateway: Any, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic
) -> None:
    # The CLI's own retries, as a user has them (the other tests turn them off): on a 401
    # it retried ten times with back-off, some three minutes behind "Working on it", then
    # said only "API Error: 401".
    config = write_config(
        tmp_path,
        target_repo,
        fake_api,
        agent={
            "env": {"ANTHROPIC_BASE_URL": fake_api.base_url, "ANTHROPIC_API_KEY": "sk-typo"},
        },
    )
    fake_api.fail_next(401, "invalid x-api-key")  # the retry alone would then have passed
    chat = gateway("chat", "--config", str(config))
    chat.expect("gateway-bot console")
    chat.send("hello from a newcomer")
    chat.expect(
        r"^error> The model API refused the agent's credentials \(HTTP 401\): set a valid "
        r"ANTHROPIC_API_KEY \(or CLAUDE_CODE_OAUTH_TOKEN, made by `claude setup-token`\)",
        timeout=90,
    )
    assert len(fake_api.asked_about("hello from a newcomer")) == 1, "stopped at the refusal"
    chat.finish()
    assert "Traceback" not in chat.stderr
    assert not re.search(r"^agent>", "\n".join(chat.lines), re.MULTILINE)


def test_chat_in_a_repo_with_no_commit_yet_says_so_at_start(gateway: Any, tmp_path: Path) -> None:
    # A newcomer's fresh project: `git init`, then the README's chat command from there. It
    # started, and the first message failed with "git show failed: fatal: invalid object
    # name 'HEAD'."
    project = tmp_path / "project"
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    chat = gateway(
        "chat",
        cwd=project,
        env={"XDG_STATE_HOME": str(tmp_path / "state-home"), "ANTHROPIC_API_KEY": "sk-x"},
    )
    assert chat.wait() == 2
    assert chat.stderr.strip().splitlines() == [
        f"repo.url {project} has no commits yet: commit something first (each conversation "
        "works on a clone of it), e.g. `git commit --allow-empty -m start`."
    ]


def test_a_local_repo_that_cannot_be_cloned_stops_run_and_chat_with_one_line(
    tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, capsys: pytest.CaptureFixture[str]
) -> None:
    plain_dir = tmp_path / "plain"
    plain_dir.mkdir()
    inside = target_repo / "docs"
    inside.mkdir()
    cases = {
        tmp_path / "missing": "is not a directory: no repo to clone there.",
        plain_dir: "is not a git repository (fatal: not a git repository",
        inside: f"is a directory inside a git repository, not its top: name its top, {target_repo}",
    }
    for repo, said in cases.items():
        config = write_config(tmp_path, repo, fake_api)
        for command in ("run", "chat"):
            # Each used to start; every message then failed with git's "repository ...
            # does not exist".
            assert main([command, "--config", str(config)]) == 2
            [line] = capsys.readouterr().err.strip().splitlines()
            assert line.startswith(f"repo.url {repo} {said}"), line
        assert main(["check", "--config", str(config)]) == 0  # check notes it
        assert f"note: repo.url {repo} {said}" in capsys.readouterr().out
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(target_repo), str(bare)], check=True)
    assert main(["check", "--config", str(write_config(tmp_path, bare, fake_api))]) == 0
    assert "note: repo.url" not in capsys.readouterr().out, "a bare repo clones"


def test_help_starts_with_what_to_run_and_check_needs_no_config(
    tmp_path: Path, target_repo: Path
) -> None:
    env = {
        **gateway_env(),
        "XDG_STATE_HOME": str(tmp_path / "state-home"),
        "GATEWAY_BOT_SANDBOX__KIND": "none",  # the built-in podman is not under test here
    }
    shown = subprocess.run(
        [sys.executable, "-m", "gateway_bot", "--help"], env=env, capture_output=True, text=True
    )
    assert shown.returncode == 0, shown.stderr
    # It used to print the module's docstring, written for developers ("Each command
    # imports what it uses ... AGENTS.md, Conventions").
    assert "start here:\n  gateway-bot chat " in shown.stdout
    assert "gateway-bot check --config FILE" in shown.stdout
    assert "AGENTS.md" not in shown.stdout
    # `check` required --config, though `chat` needs none: now it checks chat's config.
    checked = subprocess.run(
        [sys.executable, "-m", "gateway_bot", "check"],
        cwd=target_repo,
        env=env,
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stderr
    lines = checked.stdout.splitlines()
    assert lines[0] == (
        f"(built-in default config): OK (state {tmp_path}/state-home/gateway-bot, "
        f"repo {target_repo}, channels: console)"
    )
    assert not (tmp_path / "state-home").exists(), "check makes nothing"


def test_the_built_in_config_reads_the_key_from_the_projects_dotenv(
    tmp_path: Path,
    target_repo: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The README puts the key in .env at the project root; scripts/chat.sh read it, but
    # the launcher's `gateway-bot chat` did not, and said "No model credentials: set
    # ANTHROPIC_API_KEY ... in .env" to a user whose key was in that .env.
    assert cli_config.built_in_dotenv_dir() == Path(cli_config.__file__).resolve().parents[3]
    project = tmp_path / "project"
    project.mkdir()
    (project / ".env").write_text("ANTHROPIC_API_KEY=sk-from-dotenv\n")
    monkeypatch.setattr(check_command, "built_in_dotenv_dir", lambda: project)
    for name in [n for n in os.environ if n.startswith(("ANTHROPIC_", "CLAUDE"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state-home"))
    monkeypatch.setenv("GATEWAY_BOT_SANDBOX__KIND", "none")
    monkeypatch.chdir(target_repo)
    assert main(["check"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("(built-in default config): OK"), out
    assert "No model credentials" not in out
    (project / ".env").unlink()
    assert main(["check"]) == 0
    warning = capsys.readouterr().out.splitlines()[2]
    assert warning.startswith("warning: No model credentials"), warning
    # It said "OK", then only "warning": that `chat` would then refuse went unsaid.
    assert warning.endswith("in the config. Until then `run` and `chat` refuse to start.")


def test_ctrl_d_then_ctrl_c_during_a_task_say_what_happens_and_the_next_chat_answers_once(
    gateway: Any, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic
) -> None:
    config = write_config(
        tmp_path, target_repo, fake_api, execution={"shutdown_timeout_seconds": 1}
    )
    fake_api.hold("question before ctrl-c")
    chat = gateway("chat", "--config", str(config))
    chat.expect("gateway-bot console")
    chat.send("question before ctrl-c")
    assert fake_api.wait_for_held(60), "the agent never asked the model"
    chat.close_input()  # Ctrl-D first: it waits for the answer, and now says so
    chat.expect(r"^Quitting once the running task \(and any queued\) is answered; Ctrl-C to ")
    chat.process.send_signal(signal.SIGINT)
    # The wait used to be silent; then a log line and an "Exception ignored" traceback.
    chat.expect(
        r"^Stopping: a running task gets up to 1 s to finish; one that does not runs again, "
        r"from its start, at the next `gateway-bot chat`\.$"
    )
    assert chat.wait() == 0, chat.stderr
    assert "Traceback" not in chat.stderr, chat.stderr
    fake_api.release()
    again = gateway("chat", "--config", str(config))
    again.expect(r"^agent> Echo: question before ctrl-c$", timeout=90)
    again.finish()
    assert again.count("question before ctrl-c") == 1, again.lines
    assert chat.count("^agent>") == 0


def test_without_a_key_chat_names_the_dotenv_it_reads(
    tmp_path: Path,
    target_repo: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name in [n for n in os.environ if n.startswith(("ANTHROPIC_", "CLAUDE"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state-home"))
    monkeypatch.setenv("GATEWAY_BOT_SANDBOX__KIND", "none")
    monkeypatch.chdir(target_repo)
    dotenv = tmp_path / "project"  # the checkout's own .env may hold a developer's key
    dotenv.mkdir()
    monkeypatch.setattr(cli_config, "built_in_dotenv_dir", lambda: dotenv)
    assert main(["chat"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    # It said "in .env" with no config file for that .env to be beside.
    assert line.startswith("No model credentials: set ANTHROPIC_API_KEY")
    assert line.endswith(f"under agent.env in the config. (without --config: {dotenv}/.env)")


def test_a_misspelt_key_is_told_with_the_key_it_is_close_to(tmp_path: Path) -> None:
    config = tmp_path / "gateway-bot.yaml"
    config.write_text(
        "repo: {url: /srv/x}\nchanels: {console: {}}\n"
        "execution: {max_concurent_tasks: 2}\naccess: {rooms: [{match: r, timezon: UTC}]}\n"
        "something_else: 1\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_server_config(config)
    unknown = "Extra inputs are not permitted (unknown key: check its spelling and indentation"
    assert sorted(caught.value.problems) == sorted(
        [
            f"chanels: {unknown}; did you mean 'channels'?)",
            f"execution.max_concurent_tasks: {unknown}; did you mean 'max_concurrent_tasks'?)",
            f"access.rooms.0.timezon: {unknown}; did you mean 'timezone'?)",
            f"something_else: {unknown})",
        ]
    )
    with pytest.raises(ConfigError) as caught:
        parse_repo_config("modle: claude-opus-4-1\n")  # a repo's .gateway/config.yaml
    assert caught.value.problems == [f"modle: {unknown}; did you mean 'model'?)"]


def test_while_the_model_api_fails_and_is_retried_the_user_sees_it(
    gateway: Any, tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic
) -> None:
    # With the CLI's own retries (a user's: the other tests turn them off), an unreachable
    # or overloaded API was minutes of "Working on it" and nothing else.
    config = write_config(
        tmp_path,
        target_repo,
        fake_api,
        agent={"env": {"ANTHROPIC_BASE_URL": fake_api.base_url, "ANTHROPIC_API_KEY": "sk-x"}},
    )
    fake_api.fail_next(529, "Overloaded")
    chat = gateway("chat", "--config", str(config))
    chat.expect("gateway-bot console")
    chat.send("are you there")
    chat.expect(r"^  · model API: HTTP 529 \(.+\); retrying, attempt 1 of \d+$", timeout=90)
    chat.expect(r"^agent> Echo: are you there$", timeout=90)  # and then the answer
    chat.finish()


def test_a_state_dir_of_another_repo_is_refused_not_silently_used(
    tmp_path: Path, target_repo: Path, fake_api: FakeAnthropic, capsys: pytest.CaptureFixture[str]
) -> None:
    # `chat` in a second project (the built-in config's one state dir), or an edited
    # repo.url: the banner named the new repo, and the conversation went on in the first
    # one's workspace, fetched from the first one's mirror.
    first_config = write_config(tmp_path, target_repo, fake_api)
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    subprocess.run(  # what the first run there made
        ["git", "clone", "-q", "--mirror", str(target_repo), str(state_dir / "git-mirror")],
        check=True,
    )
    second = make_repo(tmp_path / "second-project")
    config = write_config(tmp_path, second, fake_api)
    said = (
        f"The state directory {state_dir} holds the work on {target_repo} (its git mirror), "
        f"not on {second}: conversations there would go on in its workspaces. The same repo "
        f"at a new address: `git --git-dir={state_dir / 'git-mirror'} remote set-url origin "
        "NEW-URL`. Another repo: give it its own state directory (state_dir in the config), "
        f"or move {state_dir} away to start afresh."
    )
    for command in ("run", "chat"):
        assert main([command, "--config", str(config)]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [said]
    assert main(["check", "--config", str(config)]) == 0
    assert f"note: {said}" in capsys.readouterr().out.splitlines()
    assert first_config == config  # the same file, rewritten: the first repo is still fine
    config.write_text(config.read_text().replace(str(second), f"{target_repo}/"))  # spelt apart
    assert main(["check", "--config", str(config)]) == 0
    assert "holds the work on" not in capsys.readouterr().out
    # A token in the URL is the same repo, and never printed.
    mirror = state_dir / "git-mirror"
    subprocess.run(
        ["git", "--git-dir", str(mirror), "remote", "set-url", "origin",
         "https://bot:s3cret@git.example/team/repo.git"],
        check=True,
    )  # fmt: skip
    config.write_text(
        config.read_text().replace(f"{target_repo}/", "https://git.example/team/repo")
    )
    assert main(["check", "--config", str(config)]) == 0
    assert "holds the work on" not in capsys.readouterr().out
    config.write_text(
        config.read_text().replace("https://git.example/team/repo", "https://git.example/o/x")
    )
    assert main(["check", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "holds the work on https://git.example/team/repo.git (its git mirror)" in out
    assert "s3cret" not in out
