// PLAYBOOK_NO_INSTALL: the one variable that declines every Debian install (npm test's global
// setups, cluster:up, image:build, image:base, the real node), CLUSTER_NO_INSTALL its deprecated
// alias; what is said before installing and when declining; and apt's stale package lists, which
// an install (the harness's and .ci/run's alike) updates first, or after it could not fetch.
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import {
  aptInstalledSize,
  aptInstallLine,
  aptSimulatedInstalls,
  ensurePrerequisites,
  installChoice,
  installDebianPackages,
  installNotice,
  MissingPrerequisiteError,
  type Prerequisite,
} from "../harness/prerequisites.js";

/** A required prerequisite that is never present. */
const missing = (command: string, debianPackage: string): Prerequisite => ({
  command,
  debianPackage,
  purpose: `${command} is needed`,
  optional: false,
  present: () => false,
});

describe("PLAYBOOK_NO_INSTALL", () => {
  it.each([
    [{}, { declined: false }],
    [{ PLAYBOOK_NO_INSTALL: "1" }, { declined: true, by: "PLAYBOOK_NO_INSTALL" }],
    [{ PLAYBOOK_NO_INSTALL: "yes" }, { declined: true, by: "PLAYBOOK_NO_INSTALL" }],
    [{ PLAYBOOK_NO_INSTALL: "0" }, { declined: false, by: "PLAYBOOK_NO_INSTALL" }],
    [{ PLAYBOOK_NO_INSTALL: "false" }, { declined: false, by: "PLAYBOOK_NO_INSTALL" }],
    [{ PLAYBOOK_NO_INSTALL: "" }, { declined: false }],
    // The new variable wins over the deprecated one whenever it is set.
    [
      { PLAYBOOK_NO_INSTALL: "0", CLUSTER_NO_INSTALL: "1" },
      { declined: false, by: "PLAYBOOK_NO_INSTALL" },
    ],
    [
      { PLAYBOOK_NO_INSTALL: "1", CLUSTER_NO_INSTALL: "0" },
      { declined: true, by: "PLAYBOOK_NO_INSTALL" },
    ],
  ])("%o gives %o", (env, expected) => {
    expect(installChoice(env)).toEqual(expected);
  });

  it("reads CLUSTER_NO_INSTALL only as a deprecated alias, and says so", () => {
    const deprecation = "CLUSTER_NO_INSTALL is deprecated: use PLAYBOOK_NO_INSTALL, which every path reads";
    expect(installChoice({ CLUSTER_NO_INSTALL: "1" })).toEqual({
      declined: true,
      by: "CLUSTER_NO_INSTALL",
      deprecation,
    });
    expect(installChoice({ CLUSTER_NO_INSTALL: "0" })).toEqual({
      declined: false,
      by: "CLUSTER_NO_INSTALL",
      deprecation,
    });
  });
});

describe("what is said about installing", () => {
  it("the notice names the packages, why, the size and how to decline", () => {
    expect(installNotice(["podman", "runc"], "the image tests build the image", "61.2 MB")).toBe(
      "Installing the Debian packages podman, runc as root with apt-get (61.2 MB on disk): the image tests build the image. " +
        "PLAYBOOK_NO_INSTALL=1 declines and prints the command instead",
    );
    expect(installNotice(["tini"], "pods need a reaper", undefined)).toBe(
      "Installing the Debian packages tini as root with apt-get: pods need a reaper. PLAYBOOK_NO_INSTALL=1 declines and prints the command instead",
    );
  });

  it("the size is what apt's simulation would install, summed from apt-cache, nothing installed", () => {
    const simulation =
      "NOTE: This is only a simulation!\nInst libtext-charwidth-perl (0.04-11 Debian:12.12/stable [amd64])\n" +
      "Inst cowsay (3.03+dfsg2-8 Debian:12.12/stable [all])\nConf cowsay (3.03+dfsg2-8 Debian:12.12/stable [all])\n";
    expect(aptSimulatedInstalls(simulation)).toEqual(["libtext-charwidth-perl", "cowsay"]);
    expect(
      aptInstalledSize("Package: a\nInstalled-Size: 61234\n\nPackage: b\nInstalled-Size: 270766\n"),
    ).toBe("332 MB");
    expect(aptInstalledSize("Package: a\nInstalled-Size: 1234\n")).toBe("1.2 MB");
    expect(aptInstalledSize("E: No packages found")).toBeUndefined();
  });

  it("the command to run is one apt-get line, with sudo when not root", () => {
    expect(aptInstallLine(["podman", "runc", "runc"], true)).toBe("apt-get install podman runc");
    expect(aptInstallLine(["tini"], false)).toBe("sudo apt-get install tini");
  });

  it("declined, it installs nothing and fails with the line to run", () => {
    const said: string[] = [];
    const saved = process.env.PLAYBOOK_NO_INSTALL;
    process.env.PLAYBOOK_NO_INSTALL = "1";
    try {
      expect(() =>
        ensurePrerequisites({
          install: false,
          log: (line) => said.push(line),
          prerequisites: [missing("podman", "podman"), missing("debootstrap", "debootstrap")],
        }),
      ).toThrow(
        new MissingPrerequisiteError(
          "podman is not on PATH (podman is needed)\ndebootstrap is not on PATH (debootstrap is needed)\n" +
            `install them with \`${aptInstallLine(["podman", "debootstrap"])}\` (not installed: PLAYBOOK_NO_INSTALL=1 declined)`,
        ),
      );
    } finally {
      if (saved === undefined) delete process.env.PLAYBOOK_NO_INSTALL;
      else process.env.PLAYBOOK_NO_INSTALL = saved;
    }
    expect(said).toEqual([]);
  });
});

const ROOT = path.join(import.meta.dirname, "../..");
const DAY_MS = 24 * 60 * 60 * 1000;
const UNABLE_TO_FETCH =
  "E: Unable to fetch some archives, maybe run apt-get update or try with --fix-missing?";
const sudo = process.getuid?.() === 0 ? "" : "sudo ";

const machines: string[] = [];
afterEach(() => {
  for (const dir of machines.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/**
 * A machine of apt's: a lists folder (PLAYBOOK_APT_LISTS_DIR) whose lists and `partial` folder
 * were last written `listsAgeMs` ago, and an apt-get first on PATH that records its arguments
 * (but for the simulations that measure the size) and fails its first `failingInstalls` installs
 * with `failure`; a sudo that runs its command stands beside it for .ci/run's installs when not
 * root.
 */
function aptMachine(options: {
  listsAgeMs?: number;
  /** When apt last wrote in `partial`, if not with the lists. */
  partialAgeMs?: number;
  failingInstalls?: number;
  failure?: string;
}) {
  const dir = mkdtempSync(path.join(tmpdir(), "playbook-apt-"));
  machines.push(dir);
  const lists = path.join(dir, "lists");
  mkdirSync(path.join(lists, "partial"), { recursive: true });
  writeFileSync(path.join(lists, "lock"), "");
  if (options.listsAgeMs !== undefined) {
    const written = new Date(Date.now() - options.listsAgeMs);
    for (const name of [
      "deb.debian.org_debian_dists_bookworm_InRelease",
      "deb.debian.org_debian_dists_bookworm_main_binary-amd64_Packages.lz4",
    ]) {
      writeFileSync(path.join(lists, name), "");
      utimesSync(path.join(lists, name), written, written);
    }
    const updated = new Date(Date.now() - (options.partialAgeMs ?? options.listsAgeMs));
    utimesSync(path.join(lists, "partial"), updated, updated);
  }
  const bin = path.join(dir, "bin");
  mkdirSync(bin);
  const calls = path.join(dir, "apt-get-calls");
  writeFileSync(calls, "");
  writeFileSync(
    path.join(bin, "apt-get"),
    `#!/bin/sh
case " $* " in *" -s "*) exit 0 ;; esac
echo "apt-get $*" >> "$APT_CALLS"
if [ "$1" = install ] && [ "$(grep -c '^apt-get install' "$APT_CALLS")" -le "$APT_FAILING_INSTALLS" ]; then
  printf '%s\\n' "$APT_FAILURE" >&2
  exit 100
fi
`,
    { mode: 0o755 },
  );
  writeFileSync(path.join(bin, "sudo"), '#!/bin/sh\nexec "$@"\n', { mode: 0o755 });
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    PATH: `${bin}:${process.env.PATH}`,
    PLAYBOOK_APT_LISTS_DIR: lists,
    APT_CALLS: calls,
    APT_FAILING_INSTALLS: String(options.failingInstalls ?? 0),
    APT_FAILURE: options.failure ?? UNABLE_TO_FETCH,
  };
  return {
    env,
    /** What apt-get was asked to do, in order: "update", "install podman runc". */
    asked: (): string[] =>
      readFileSync(calls, "utf8")
        .split("\n")
        .filter(Boolean)
        .map((line) =>
          line
            .replace(/^apt-get /, "")
            .replace(/ -(y|qq)\b|--no-install-recommends ?/g, "")
            .trim(),
        ),
  };
}

interface Installed {
  /** What was said on the way (the harness's log lines, .ci/run's stderr). */
  said: string;
  /** The failure's message, when the install failed. */
  failure?: string;
}

const installers: { name: string; install: (env: NodeJS.ProcessEnv, packages: string[]) => Installed }[] = [
  {
    name: "npm test, cluster:up, image:build (installDebianPackages)",
    install: (env, packages) => {
      const said: string[] = [];
      try {
        installDebianPackages(packages, { log: (line) => said.push(line), env });
        return { said: said.join("\n") };
      } catch (error) {
        return { said: said.join("\n"), failure: (error as Error).message };
      }
    },
  },
  {
    name: ".ci/run (apt_install of tools/apt-install.sh)",
    install: (env, packages) => {
      const result = spawnSync(
        "bash",
        [
          "-c",
          'source tools/apt-install.sh && apt_install --no-install-recommends "$@"',
          "bash",
          ...packages,
        ],
        { cwd: ROOT, env, encoding: "utf8" },
      );
      return { said: result.stderr, ...(result.status === 0 ? {} : { failure: result.stderr }) };
    },
  },
];

describe.each(installers)("installing Debian packages with stale apt lists: $name", ({ install }) => {
  it("runs apt-get update before the install when the lists are two days old, and says so", () => {
    const machine = aptMachine({ listsAgeMs: 2 * DAY_MS });
    const { said, failure } = install(machine.env, ["podman", "runc"]);
    expect(failure).toBeUndefined();
    expect(machine.asked()).toEqual(["update", "install podman runc"]);
    expect(said).toContain("apt's package lists are 2 days old: running apt-get update first");
  });

  it("runs apt-get update first where there are no lists yet", () => {
    const machine = aptMachine({});
    const { said } = install(machine.env, ["podman"]);
    expect(machine.asked()).toEqual(["update", "install podman"]);
    expect(said).toMatch(/apt has no package lists in \S+: running apt-get update first/);
  });

  it("installs without an update when the lists are an hour old", () => {
    const machine = aptMachine({ listsAgeMs: 60 * 60 * 1000 });
    const { said, failure } = install(machine.env, ["podman"]);
    expect(failure).toBeUndefined();
    expect(machine.asked()).toEqual(["install podman"]);
    expect(said).not.toContain("apt-get update");
  });

  it("counts an update in which no list changed (apt wrote in partial an hour ago) as fresh", () => {
    const machine = aptMachine({ listsAgeMs: 9 * DAY_MS, partialAgeMs: 60 * 60 * 1000 });
    install(machine.env, ["podman"]);
    expect(machine.asked()).toEqual(["install podman"]);
  });

  it("updates and tries once more when the install could not fetch, and says so", () => {
    const machine = aptMachine({ listsAgeMs: 60 * 60 * 1000, failingInstalls: 1 });
    const { said, failure } = install(machine.env, ["podman", "runc"]);
    expect(failure).toBeUndefined();
    expect(machine.asked()).toEqual(["install podman runc", "update", "install podman runc"]);
    expect(said).toContain(
      `apt-get install could not fetch (${UNABLE_TO_FETCH}): running apt-get update and trying once more`,
    );
  });

  it("fails when the retry cannot fetch either, naming the packages and the apt-get line to run", () => {
    const machine = aptMachine({ listsAgeMs: 60 * 60 * 1000, failingInstalls: 2 });
    const { failure } = install(machine.env, ["podman", "runc"]);
    expect(machine.asked()).toEqual(["install podman runc", "update", "install podman runc"]);
    expect(failure).toContain(
      `apt-get could not install podman, runc, even after apt-get update: ${UNABLE_TO_FETCH}\n` +
        `install them with \`${sudo}apt-get update && ${sudo}apt-get install podman runc\``,
    );
  });

  it("does not update or retry a failure that is not a fetch", () => {
    const broken = "E: Sub-process /usr/bin/dpkg returned an error code (1)";
    const machine = aptMachine({ listsAgeMs: 60 * 60 * 1000, failingInstalls: 1, failure: broken });
    const { failure } = install(machine.env, ["podman"]);
    expect(machine.asked()).toEqual(["install podman"]);
    expect(failure).toContain(`apt-get could not install podman: ${broken}\n`);
  });
});

// ensurePrerequisites installs only as root.
describe.runIf(process.getuid?.() === 0)("a path whose install cannot fetch twice", () => {
  it("stops naming what is missing, why the install failed and the line to run", () => {
    const machine = aptMachine({ listsAgeMs: 2 * DAY_MS, failingInstalls: 2 });
    const names = ["PATH", "PLAYBOOK_APT_LISTS_DIR", "APT_CALLS", "APT_FAILING_INSTALLS", "APT_FAILURE"];
    const saved = Object.fromEntries(names.map((name) => [name, process.env[name]]));
    for (const name of names) process.env[name] = machine.env[name];
    const said: string[] = [];
    try {
      expect(() =>
        ensurePrerequisites({
          install: true,
          log: (line) => said.push(line),
          prerequisites: [missing("podman", "podman")],
          why: "the image tests build the image",
        }),
      ).toThrow(
        "podman is not on PATH (podman is needed)\n" +
          `apt-get could not install podman, even after apt-get update: ${UNABLE_TO_FETCH}\n` +
          "install them with `apt-get update && apt-get install podman`",
      );
    } finally {
      for (const name of names) {
        if (saved[name] === undefined) delete process.env[name];
        else process.env[name] = saved[name];
      }
    }
    expect(machine.asked()).toEqual(["update", "install podman", "update", "install podman"]);
    expect(said).toEqual([
      installNotice(["podman"], "the image tests build the image", undefined),
      "apt's package lists are 2 days old: running apt-get update first",
      `apt-get install could not fetch (${UNABLE_TO_FETCH}): running apt-get update and trying once more`,
    ]);
  });
});
