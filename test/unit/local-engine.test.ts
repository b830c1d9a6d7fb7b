// The pure parts of local mode's engine and containers: which containers a run needs, what the
// refusal says when no engine answers, and spec.resources as the engines take them.
import { describe, expect, it } from "vitest";
import { cpuArg, memoryArg, planTaskContainers, runArgs } from "../../src/pod-runner/local-containers.js";
import { describeLooks, whatToInstall } from "../../src/pod-runner/local-engine.js";

describe("local task containers", () => {
  it("makes one container per distinct image in first-use order, none for host tasks", () => {
    expect(planTaskContainers(["a:1", undefined, "b:2", "a:1"])).toEqual({
      containers: [
        { name: "task-1", image: "a:1" },
        { name: "task-2", image: "b:2" },
      ],
      containerOf: ["task-1", undefined, "task-2", "task-1"],
    });
  });

  it("takes Kubernetes quantities as --memory bytes and --cpus", () => {
    expect(memoryArg("64Mi")).toBe(String(64 * 2 ** 20));
    expect(memoryArg("1G")).toBe("1000000000");
    expect(memoryArg("1048576")).toBe("1048576");
    expect(cpuArg("500m")).toBe("0.5");
    expect(cpuArg("2")).toBe("2");
  });

  it("starts the agent as the entrypoint with the run dir read-only and the workspace", () => {
    const args = runArgs(
      {
        engine: { kind: "podman", command: "podman", rootless: false },
        runId: "r1",
        containers: [],
        agent: { agent: "/x/agent", busybox: "/x/busybox" },
        runDir: "/tmp/run",
        workspace: "/tmp/ws",
      },
      { name: "task-1", image: "postgres:16" },
      "playbook-r1-task-1",
    );
    const joined = args.join(" ");
    expect(joined).toContain("--volume /x/agent:/playbook/agent/agent:ro");
    expect(joined).toContain("--volume /tmp/run:/playbook/run:ro");
    expect(joined).toContain("--volume /tmp/ws:/workspace");
    expect(joined).toContain("--label playbook.dev/run=r1");
    expect(args.slice(-4)).toEqual([
      "/playbook/agent/agent",
      "postgres:16",
      "/playbook/run/runner.sock",
      "task-1",
    ]);
  });
});

describe("no container engine", () => {
  it("says what was found and what to install", () => {
    const none = [
      { kind: "podman" as const, found: false },
      { kind: "docker" as const, found: false },
    ];
    expect(describeLooks(none)).toBe("neither podman nor docker is on PATH");
    expect(whatToInstall(none)).toBe("install podman (Debian/Ubuntu: apt-get install podman) or docker");
    const silent = [
      { kind: "podman" as const, found: false },
      { kind: "docker" as const, found: true, error: "`docker info` failed: Cannot connect" },
    ];
    expect(describeLooks(silent)).toBe(
      "podman is not on PATH; docker is on PATH but does not answer (`docker info` failed: Cannot connect)",
    );
    expect(whatToInstall(silent)).toContain("or start the Docker daemon");
  });
});
