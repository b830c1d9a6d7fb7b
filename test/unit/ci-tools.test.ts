// .ci/run's cluster binaries (.ci/tools.sh): the control-plane set is built first and waited for
// before npm test, the real-node set right after it at the lowest priority and waited for only
// before the real-node phases, each wait saying how long its build took, and a failed set failing
// its wait with the reason. A small Go module stands in for the binaries (PLAYBOOK_TOOLS_TARGETS).
import { execFileSync, spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { getPriority, tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

const ROOT = join(import.meta.dirname, "../..");
const made: string[] = [];
afterAll(() => {
  for (const dir of made) rmSync(dir, { recursive: true, force: true });
});

/**
 * A module whose two commands stand in for kube-apiserver (control-plane) and kubelet
 * (real-node), and a go that notes the nice value each `go build` runs at.
 */
function fixture(): { dir: string; env: NodeJS.ProcessEnv; niceOf: (pkg: string) => string } {
  const dir = mkdtempSync(join(tmpdir(), "ci-tools-"));
  made.push(dir);
  const mod = join(dir, "mod");
  for (const name of ["first", "second"]) {
    mkdirSync(join(mod, "cmd", name), { recursive: true });
    writeFileSync(join(mod, "cmd", name, "main.go"), `package main\n\nfunc main() { println("${name}") }\n`);
  }
  writeFileSync(join(mod, "go.mod"), "module example.com/citools\n\ngo 1.21\n");
  const realGo = join(
    execFileSync("bash", [join(ROOT, "tools/install-go.sh")], { encoding: "utf8" }).trim(),
    "go",
  );
  const goDir = join(dir, "go-bin");
  mkdirSync(goDir);
  writeFileSync(
    join(goDir, "go"),
    `#!/bin/sh\ncase "$1" in build) for a; do case "$a" in ./cmd/*) ps -o ni= -p $$ | tr -d ' ' >"${dir}/nice-\${a#./cmd/}" ;; esac; done ;; esac\nexec ${realGo} "$@"\n`,
  );
  chmodSync(join(goDir, "go"), 0o755);
  return {
    dir,
    env: {
      ...process.env,
      // bash -c reads no startup file that could put another go before this one on PATH.
      BASH_ENV: undefined,
      PATH: `${goDir}:${process.env.PATH}`,
      PLAYBOOK_TOOLS_CACHE: join(dir, "cache"),
      PLAYBOOK_TOOLS_TARGETS: `kube-apiserver=${mod}:./cmd/first kubelet=${mod}:./cmd/second`,
    },
    niceOf: (pkg) => {
      const file = join(dir, `nice-${pkg}`);
      expect(existsSync(file), `the go on PATH (${goDir}) did not run go build ./cmd/${pkg}`).toBe(true);
      return readFileSync(file, "utf8").trim();
    },
  };
}

function ciTools(script: string, env: NodeJS.ProcessEnv) {
  // --norc: a `bash -c` whose stdin is a socket (spawnSync's pipes are socketpairs) takes itself
  // for a command run by sshd and sources ~/.bashrc when SHLVL is unset or 0 (vitest started by a
  // program rather than a shell, or by `(npx vitest run &)` from a top-level shell). A ~/.bashrc
  // that puts /usr/local/go/bin first on PATH hid the fake go: both sets were built with the real
  // one and no nice file was written.
  return spawnSync(
    "bash",
    ["--norc", "-c", `. .ci/tools.sh\nstart_tools_builds\ntrap stop_tools_builds EXIT\n${script}`],
    {
      cwd: ROOT,
      env,
      encoding: "utf8",
      timeout: 120_000,
    },
  );
}

describe(".ci/run's cluster binaries", () => {
  it("builds the control-plane set, then the real-node set at nice 19, and says how long each took", () => {
    const { env, niceOf } = fixture();
    const result = ciTools(
      'wait_for_tools control-plane || exit 1\necho "-- npm test"\nwait_for_tools real-node || exit 2',
      env,
    );
    expect(result.status, result.stdout + result.stderr).toBe(0);
    const [controlPlane = "", realNode = ""] = result.stdout.split("-- npm test");
    expect(controlPlane).toContain("tools:bin: building kube-apiserver from ./cmd/first");
    expect(controlPlane).not.toContain("kubelet");
    expect(controlPlane).toMatch(
      /^control-plane binaries: \/\S+ \(tools\/build\.sh took \d+ s, done \d+ s after the start; waited for here until \d+ s\)$/m,
    );
    expect(realNode).toContain("tools:bin: building kubelet from ./cmd/second");
    expect(realNode).toMatch(
      /^real-node binaries: \/\S+ \(tools\/build\.sh took \d+ s, done \d+ s after the start/m,
    );
    // The control-plane set at the test's own priority (vitest may itself run under nice).
    expect(niceOf("first")).toBe(String(getPriority()));
    expect(niceOf("second")).toBe("19");
  });

  it("fails the wait for a set whose build failed, with the compiler's reason; the other set's wait passes", () => {
    const { dir, env } = fixture();
    writeFileSync(
      join(dir, "mod", "cmd", "second", "main.go"),
      "package main\n\nfunc main() { undefinedCall() }\n",
    );
    const result = ciTools(
      'wait_for_tools control-plane || exit 1\necho "-- npm test"\nwait_for_tools real-node && exit 0\necho "real-node failed"; exit 3',
      env,
    );
    expect(result.status, result.stdout + result.stderr).toBe(3);
    const [, realNode = ""] = result.stdout.split("-- npm test");
    expect(realNode).toContain("undefined: undefinedCall");
    expect(realNode).toContain("tools:bin failed: the real-node binaries could not be built (see above)");
    expect(realNode).toContain("real-node failed");
  });

  it("fails both waits when the control-plane set fails, saying the real-node set was not built", () => {
    const { dir, env } = fixture();
    writeFileSync(
      join(dir, "mod", "cmd", "first", "main.go"),
      "package main\n\nfunc main() { undefinedCall() }\n",
    );
    const result = ciTools(
      'wait_for_tools control-plane && exit 0\necho "-- control-plane failed"\nwait_for_tools real-node && exit 0\nexit 4',
      env,
    );
    expect(result.status, result.stdout + result.stderr).toBe(4);
    const [controlPlane = "", realNode = ""] = result.stdout.split("-- control-plane failed");
    expect(controlPlane).toContain(
      "tools:bin failed: the control-plane binaries could not be built (see above)",
    );
    expect(realNode).toContain("the real-node binaries were not built: the control-plane set failed first");
  });
});
