"""docker/: the container user's uid and gid come from build arguments that a
shell can set (bash's UID is read-only and not exported, so compose's
${UID:-1000} was always 1000), and the documented recipe sets them.
"""
import os
import re
import subprocess

import pytest

from conftest import PKG_ROOT

REPO = os.path.dirname(PKG_ROOT)
DOCKER = os.path.join(REPO, "docker")
if not os.path.isdir(DOCKER):
    pytest.skip("the repository's docker/ is not here", allow_module_level=True)


def compose_args():
    yaml = pytest.importorskip("yaml")
    c = yaml.safe_load(open(os.path.join(DOCKER, "compose.yaml")))
    return c["services"]["train"]["build"]["args"]


def interpolate(value, env):
    """Compose's ${VAR:-default} and ${VAR}, as compose reads the shell's environment."""
    def one(m):
        name, default = m.group(1), m.group(3) or ""
        return env.get(name) or default
    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}", one, value)


def recipe_env(recipe):
    """The environment compose sees when bash runs `recipe docker ...` (docker
    replaced by printenv)."""
    r = subprocess.run(["bash", "-c", recipe + " env"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)


def documented_recipe():
    text = open(os.path.join(REPO, "docs", "container.md")).read()
    m = re.search(r"^((?:[A-Z_]+=\$\(id -[ug]\) )+)docker compose .* build", text, re.M)
    assert m, "docs/container.md shows no `VAR=$(id -u) ... docker compose ... build` recipe"
    return m.group(1)


def test_the_documented_recipe_reaches_the_build_arguments():
    recipe = documented_recipe()
    env = recipe_env(recipe)
    args = {k: interpolate(v, env) for k, v in compose_args().items()}
    uid, gid = str(os.getuid()), str(os.getgid())
    assert sorted(args.values()) == sorted([uid, gid]), (recipe, args)
    # with another uid than the caller's: what the recipe sets is what compose passes
    env = recipe_env(recipe.replace("$(id -u)", "4321").replace("$(id -g)", "8765"))
    args = {k: interpolate(v, env) for k, v in compose_args().items()}
    assert sorted(args.values()) == ["4321", "8765"], args


def test_build_arguments_are_settable_from_bash():
    for name, value in compose_args().items():
        for var in re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", value):
            r = subprocess.run(["bash", "-c", f"{var}=4321 printenv {var}"],
                               capture_output=True, text=True)
            assert r.stdout.strip() == "4321", f"{name}: ${{{var}}} cannot be set from bash: {r.stderr}"


def test_dockerfile_uses_the_compose_arguments():
    text = open(os.path.join(DOCKER, "Dockerfile")).read()
    args = re.findall(r"^ARG ([A-Z_]+)=", text, re.M)
    for name in compose_args():
        assert name in args, f"compose passes {name}, which the Dockerfile does not declare"
        assert "${%s}" % name in text.split(f"ARG {name}=", 1)[1], f"{name} is not used"
    user = re.findall(r"^USER (.*)$", text, re.M)[-1]
    assert all(f"${{{n}}}" in user for n in compose_args()), user
