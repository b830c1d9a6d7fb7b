// An engine counts only when it answers: a `docker` client with no daemon (Docker Desktop stopped,
// CI images with the CLI only, this machine) is no engine, so podman is chosen where it answers,
// image:build asks for podman instead of reading a failed `docker image inspect` as "not built",
// and the error says what was found and what to do.
import { spawnSync } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { chooseEngine, type EngineKind, type EngineProbe } from "../harness/container-engine.js";

const DIST = path.join(import.meta.dirname, "../../dist");
const ENGINE_SCRIPT = path.join(DIST, "test/harness/container-engine.js");
const IMAGE_BUILD = path.join(DIST, "scripts/image-build.js");
const NO_DAEMON =
  "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?";

function which(command: string): string | undefined {
  const found = spawnSync("sh", ["-c", 'command -v "$1"', "sh", command], { encoding: "utf8" }).stdout.trim();
  return found || undefined;
}

let dir: string | undefined;
afterEach(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
  dir = undefined;
});

/** A PATH holding a `docker` that fails as the real client does with no daemon, and these commands of this machine. */
function pathWithDeadDocker(commands: string[]): string {
  dir = mkdtempSync(path.join(tmpdir(), "playbook-engine-"));
  const bin = path.join(dir, "bin");
  mkdirSync(bin);
  writeFileSync(path.join(bin, "docker"), `#!/bin/sh\necho '${NO_DAEMON}' >&2\nexit 1\n`);
  chmodSync(path.join(bin, "docker"), 0o755);
  for (const command of ["sh", "mv", ...commands]) {
    const found = which(command);
    if (found) symlinkSync(found, path.join(bin, command));
  }
  return bin;
}

function runNode(script: string, args: string[], env: NodeJS.ProcessEnv) {
  return spawnSync(process.execPath, [script, ...args], {
    encoding: "utf8",
    env: { HOME: process.env.HOME, PLAYBOOK_NO_INSTALL: "1", ...env },
    timeout: 60_000,
  });
}

const seen =
  (table: Partial<Record<EngineKind, EngineProbe>>) =>
  (kind: EngineKind): EngineProbe =>
    table[kind] ?? { onPath: false, answers: false };

describe("choosing the container engine", () => {
  const dead: EngineProbe = { onPath: true, answers: false, error: NO_DAEMON };
  const live: EngineProbe = { onPath: true, answers: true };

  it("takes podman when it answers, and docker only when its daemon answers", () => {
    expect(chooseEngine(undefined, seen({ podman: live, docker: dead }))).toEqual({ kind: "podman" });
    expect(chooseEngine(undefined, seen({ docker: live }))).toEqual({ kind: "docker" });
    expect(chooseEngine(undefined, seen({ podman: dead, docker: live }))).toEqual({ kind: "docker" });
    expect(chooseEngine("docker", seen({ podman: live, docker: live }))).toEqual({ kind: "docker" });
  });

  it("treats a docker client with no daemon as no engine and says so", () => {
    const choice = chooseEngine(undefined, seen({ docker: dead }));
    expect(choice).toEqual({
      error:
        `No working container engine: docker is on PATH but does not answer (docker version --format {{.Server.Version}}: ${NO_DAEMON}); ` +
        "start the Docker daemon or install podman (Debian: apt-get install podman runc containernetworking-plugins)",
    });
  });

  it("names what is missing when neither is on PATH, and a bad PLAYBOOK_CONTAINER_ENGINE", () => {
    expect(chooseEngine(undefined, seen({}))).toMatchObject({
      error: expect.stringMatching(
        /^No container engine: neither podman nor docker is on PATH; install podman/,
      ),
    });
    expect(chooseEngine("podman", seen({ docker: live }))).toMatchObject({
      error: expect.stringMatching(
        /^No container engine: podman \(PLAYBOOK_CONTAINER_ENGINE\) is not on PATH/,
      ),
    });
    expect(chooseEngine("lxc", seen({ podman: live }))).toEqual({
      error: 'PLAYBOOK_CONTAINER_ENGINE is "lxc": it must be podman or docker (or unset)',
    });
  });
});

describe("a docker on PATH that cannot connect", () => {
  it("is not chosen, and the error says it does not answer", () => {
    const result = runNode(ENGINE_SCRIPT, ["kind"], { PATH: pathWithDeadDocker([]) });
    expect(result.status, result.stderr).toBe(1);
    expect(result.stdout).toBe("");
    expect(result.stderr.trim()).toBe(
      `container-engine: No working container engine: docker is on PATH but does not answer (docker version --format {{.Server.Version}}: ${NO_DAEMON}); ` +
        "start the Docker daemon or install podman (Debian: apt-get install podman runc containernetworking-plugins)",
    );
  });

  // Skipped only where podman is not installed: there is nothing to give way to.
  it.skipIf(!which("podman"))("gives way to podman where podman answers", () => {
    const result = runNode(ENGINE_SCRIPT, ["kind"], {
      PATH: pathWithDeadDocker(["podman", "runc"]),
      PLAYBOOK_PODMAN_DIR: process.env.PLAYBOOK_PODMAN_DIR,
      XDG_CACHE_HOME: process.env.XDG_CACHE_HOME,
    });
    expect(result.status, result.stderr).toBe(0);
    expect(result.stdout).toBe("podman\n");
  });

  it("does not stand in for podman in image:build: the missing packages are named, in one apt-get line", () => {
    const result = runNode(IMAGE_BUILD, [], { PATH: pathWithDeadDocker([]) });
    expect(result.status, result.stderr).toBe(1);
    expect(result.stdout).toBe("");
    expect(result.stderr).toContain("image:build: failed: podman is not on PATH (builds the project's image");
    expect(result.stderr).toMatch(
      /install them with `(sudo )?apt-get install podman runc (containernetworking-plugins )?debootstrap` \(not installed: PLAYBOOK_NO_INSTALL=1 declined\)/,
    );
    // Never read as "the image is not built": nothing was built or looked up.
    expect(result.stderr).not.toMatch(/not built|debootstrap --variant|ENOENT/);
  });

  // Skipped only where the real docker client or podman is not installed.
  it.skipIf(!which("docker") || !which("podman"))(
    "the real docker client with DOCKER_HOST at a dead socket is passed over for podman",
    () => {
      const bin = pathWithDeadDocker(["podman", "runc"]);
      rmSync(path.join(bin, "docker"));
      symlinkSync(which("docker") as string, path.join(bin, "docker"));
      const env = {
        PATH: bin,
        DOCKER_HOST: `unix://${path.join(dir as string, "no-daemon.sock")}`,
        PLAYBOOK_PODMAN_DIR: process.env.PLAYBOOK_PODMAN_DIR,
        XDG_CACHE_HOME: process.env.XDG_CACHE_HOME,
      };
      expect(runNode(ENGINE_SCRIPT, ["kind"], env).stdout).toBe("podman\n");
      const docker = runNode(ENGINE_SCRIPT, ["kind"], { ...env, PLAYBOOK_CONTAINER_ENGINE: "docker" });
      expect(docker.status).toBe(1);
      expect(docker.stderr).toMatch(
        /docker is on PATH but does not answer \(docker version --format \{\{\.Server\.Version\}\}: .*no-daemon\.sock.*\); start the Docker daemon or install podman/,
      );
    },
  );
});
