// The chart and the image fit together: the Deployment's controller container, as a kubelet starts
// it from the image (the container's command, else the image's entrypoint; its args, else the
// image's CMD when no command is set), runs `playbook controller` under tini, and the image started
// exactly so, with the chart's security context, gets into the controller (it stops at the missing
// kubeconfig given here) instead of tini failing to exec a program named `controller`.
// The real-kubelet install (test/real-node/install.test.ts) runs the same pairing on containerd.
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import { beforeAll, describe, expect, it } from "vitest";
import { parseAllDocuments } from "yaml";
import { z } from "zod";
import { repoRoot, toolsBinDir } from "../harness/binaries.js";
import { containerEngine, engineRun } from "../harness/container-engine.js";
import { IMAGE, TINI } from "./support.js";

const run = promisify(execFile);

const ContainerSpec = z.object({
  name: z.string(),
  image: z.string(),
  command: z.array(z.string()).optional(),
  args: z.array(z.string()).optional(),
  securityContext: z.object({
    readOnlyRootFilesystem: z.boolean().optional(),
    allowPrivilegeEscalation: z.boolean().optional(),
    runAsNonRoot: z.boolean().optional(),
    runAsUser: z.number().optional(),
    capabilities: z.object({ drop: z.array(z.string()) }).optional(),
  }),
});
const ImageConfig = z.object({
  Entrypoint: z.array(z.string()).nullable().optional(),
  Cmd: z.array(z.string()).nullable().optional(),
  User: z.string().optional(),
});

const PodSecurity = z.object({ runAsUser: z.number().optional(), runAsGroup: z.number().optional() });

let container: z.infer<typeof ContainerSpec>;
let podSecurity: z.infer<typeof PodSecurity>;
let config: z.infer<typeof ImageConfig>;
const engine = containerEngine();

beforeAll(async () => {
  const binDir = await toolsBinDir("control-plane");
  // The image this run built, named through the chart's values as a user names a pushed one
  // (podman keeps a local build as localhost/NAME).
  const [repository = "", tag = ""] = IMAGE.split(/:(?=[^:/]+$)/);
  const { stdout } = await run(
    path.join(binDir, "helm"),
    [
      "template",
      "pbc",
      path.join(repoRoot(), "charts", "playbook-controller"),
      "--set",
      "image.registry=localhost",
      "--set",
      `image.repository=${repository}`,
      "--set",
      `image.tag=${tag}`,
    ],
    { maxBuffer: 1 << 22 },
  );
  const deployment = parseAllDocuments(stdout)
    .map(
      (doc) =>
        doc.toJS() as {
          kind?: string;
          spec?: { template?: { spec?: { containers?: unknown[]; securityContext?: unknown } } };
        },
    )
    .find((doc) => doc?.kind === "Deployment");
  container = ContainerSpec.parse(deployment?.spec?.template?.spec?.containers?.[0]);
  podSecurity = PodSecurity.parse(deployment?.spec?.template?.spec?.securityContext);
  config = ImageConfig.parse(
    JSON.parse(
      await engineRun(engine, ["image", "inspect", "--format", "{{json .Config}}", container.image]),
    ),
  );
});

/** The argv a kubelet starts: command replaces the entrypoint (and drops CMD); args replace CMD. */
function kubeletArgv(): string[] {
  const entrypoint = container.command ?? config.Entrypoint ?? [];
  const args = container.args ?? (container.command ? [] : (config.Cmd ?? []));
  return [...entrypoint, ...args];
}

describe("the chart's Deployment on the project's image", () => {
  it("names the image it was given", () => {
    expect(container.image).toBe(`localhost/${IMAGE}`);
  });

  it("runs `playbook controller` under tini: the image's entrypoint is `tini -- playbook`, the chart passes the subcommand", () => {
    expect(config.Entrypoint).toEqual([TINI, "--", "playbook"]);
    expect(container.command).toBeUndefined();
    expect(kubeletArgv().slice(0, 4)).toEqual([TINI, "--", "playbook", "controller"]);
  });

  it("starts the controller when the image runs with those args and the chart's security context", async () => {
    const security = container.securityContext;
    expect(security).toMatchObject({ readOnlyRootFilesystem: true, allowPrivilegeEscalation: false });
    expect(podSecurity.runAsUser).toBe(65532);
    // The kubelet's way, with podman: the image's own entrypoint, the chart's args as the command.
    const result = await run(
      engine.command,
      [
        "run",
        "--rm",
        "--network=none",
        ...(security.readOnlyRootFilesystem ? ["--read-only", "--tmpfs=/tmp"] : []),
        ...(security.allowPrivilegeEscalation === false ? ["--security-opt=no-new-privileges"] : []),
        ...(security.capabilities?.drop.includes("ALL") ? ["--cap-drop=ALL"] : []),
        `--user=${security.runAsUser ?? podSecurity.runAsUser ?? 0}:${podSecurity.runAsGroup ?? 0}`,
        "--env=KUBECONFIG=/nonexistent/kubeconfig",
        container.image,
        ...(container.args ?? []),
      ],
      { env: engine.env, timeout: 60_000 },
    ).then(
      () => ({ code: 0, output: "" }),
      (error: { code?: number; stdout?: string; stderr?: string }) => ({
        code: error.code ?? -1,
        output: `${error.stdout ?? ""}${error.stderr ?? ""}`,
      }),
    );
    // Before the fix: `[FATAL tini (7)] exec controller failed: No such file or directory`.
    expect(result.output).not.toMatch(/FATAL tini|exec .* failed/);
    // Every chart flag parsed (a bad one exits 2 with usage); the controller then reads its kubeconfig.
    expect(result.output).toMatch(/ENOENT: no such file or directory, open '\/nonexistent\/kubeconfig'/);
    expect(result.code).toBe(1);
  });

  it("keeps `run IMAGE run -f FILE` working: arguments are playbook's", async () => {
    const version = (await engineRun(engine, ["run", "--rm", "--network=none", IMAGE, "--version"])).trim();
    const { version: expected } = z
      .object({ version: z.string() })
      .parse(JSON.parse(readFileSync(path.join(repoRoot(), "package.json"), "utf8")));
    expect(version).toBe(expected);
    const example = await engineRun(engine, [
      "run",
      "--rm",
      "--network=none",
      `--volume=${path.join(repoRoot(), "examples", "hello.yaml")}:/work/hello.yaml:ro`,
      IMAGE,
      "run",
      "-f",
      "/work/hello.yaml",
      "-o",
      "json",
    ]);
    expect(
      z.object({ status: z.object({ phase: z.string() }) }).parse(JSON.parse(example)).status.phase,
    ).toBe("Succeeded");
  });
});
