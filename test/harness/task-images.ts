// The three task images of issue 20's real-node tests, built here (nothing can be pulled) and
// imported into the real node's containerd under fixed local names:
// - debian: the Debian bookworm minbase root the project's base stand-in is made from
//   (debootstrap), plus spin built against glibc. Has /bin/sh and GNU coreutils (`timeout`).
// - musl: spin built with Debian's musl-gcc, dynamically linked, and musl's loader
//   (/lib/ld-musl-x86_64.so.1, which is musl's libc.so itself). No glibc, no shell.
// - static: one static binary (spin built with musl-gcc -static), nothing else: distroless-like.
// spin (real-node/spin.c) gives the behaviours the tests need where there is no shell; the agent's
// busybox runs the tasks' `run:` scripts in the two shell-less images.
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { chmod, copyFile, mkdir, mkdtemp, readdir, realpath, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { z } from "zod";
import { repoRoot } from "./binaries.js";
import { debianRoot } from "./image.js";
import { imageCacheDir, writeOciArchive } from "./real-node/images.js";

const run = promisify(execFile);

export const TASK_IMAGES = {
  debian: "playbook.test/debian:1",
  musl: "playbook.test/musl:1",
  static: "playbook.test/static:1",
} as const;
export type TaskImageKind = keyof typeof TASK_IMAGES;
export const TASK_IMAGE_KINDS = Object.keys(TASK_IMAGES) as TaskImageKind[];

/** Where spin is in every task image. */
export const SPIN = "/usr/bin/spin";

const PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

const spinSource = () => path.join(repoRoot(), "test", "harness", "real-node", "spin.c");

/** Raise when what the images hold changes other than through spin.c. */
const BUILD_VERSION = "1";

/** Changes whenever spin.c or BUILD_VERSION changes, so a stale archive is never imported. */
function buildKey(): string {
  const hash = createHash("sha256");
  hash.update(BUILD_VERSION);
  hash.update(readFileSync(spinSource()));
  return hash.digest("hex").slice(0, 12);
}

/** What spin says it is (`spin hello`), by image. */
export const SPIN_KINDS: Record<TaskImageKind, string> = {
  debian: "debian-glibc",
  musl: "musl-dynamic",
  static: "static",
};

async function compile(
  kind: TaskImageKind,
  compiler: string,
  args: string[],
  output: string,
  why: string,
): Promise<void> {
  try {
    await run(compiler, [
      ...["-O2", "-s", "-Wall", `-DSPIN_KIND="${SPIN_KINDS[kind]}"`],
      ...args,
      ...["-o", output, spinSource()],
    ]);
  } catch (error) {
    const { stderr } = error as { stderr?: string };
    throw new Error(`could not build spin for the ${why} (${compiler}): ${stderr ?? error}`, {
      cause: error,
    });
  }
}

/** The ELF interpreter a dynamically linked binary names (readelf -l). */
async function interpreterOf(binary: string): Promise<string> {
  const { stdout } = await run("readelf", ["-l", binary]);
  const match = /Requesting program interpreter: ([^\]]+)\]/.exec(stdout);
  if (!match?.[1]) throw new Error(`${binary} names no program interpreter`);
  return match[1];
}

async function buildRoot(kind: TaskImageKind, rootfs: string, log: (message: string) => void): Promise<void> {
  const bin = path.join(rootfs, "usr", "bin");
  if (kind === "debian") {
    const base = await debianRoot(log);
    // A copy: the cached root is the base stand-in's too.
    await run("cp", ["-a", `${base}/.`, rootfs]);
    await compile(kind, "gcc", [], path.join(bin, "spin"), "Debian image");
    return;
  }
  await mkdir(bin, { recursive: true });
  const spin = path.join(bin, "spin");
  if (kind === "static") {
    await compile(kind, "musl-gcc", ["-static"], spin, "static image (apt-get install musl-tools)");
    return;
  }
  await compile(kind, "musl-gcc", [], spin, "musl image (apt-get install musl-tools)");
  const loader = await interpreterOf(spin);
  if (!/ld-musl/.test(loader))
    throw new Error(`musl-gcc made a binary that asks for ${loader}, not musl's loader`);
  if (!existsSync(loader)) throw new Error(`musl's loader ${loader} is missing here (apt-get install musl)`);
  await mkdir(path.join(rootfs, path.dirname(loader)), { recursive: true });
  // The loader is musl's libc.so (Debian links it from /lib); the binary needs nothing else.
  await copyFile(await realpath(loader), path.join(rootfs, loader));
  await chmod(path.join(rootfs, loader), 0o755);
  await mkdir(path.join(rootfs, "tmp"), { mode: 0o1777 });
  await chmod(path.join(rootfs, "tmp"), 0o1777);
}

/** The OCI archive of one task image, built once per version of spin.c and this file. */
export async function taskImageArchive(kind: TaskImageKind, log: (message: string) => void): Promise<string> {
  const dir = imageCacheDir();
  const archive = path.join(dir, `task-${kind}-${buildKey()}.oci.tar`);
  if (existsSync(archive)) return archive;
  await mkdir(dir, { recursive: true });
  const started = Date.now();
  const work = await mkdtemp(path.join(os.tmpdir(), `playbook-task-${kind}-`));
  try {
    const rootfs = path.join(work, "rootfs");
    await mkdir(rootfs);
    await buildRoot(kind, rootfs, log);
    await writeOciArchive(rootfs, TASK_IMAGES[kind], { env: [PATH_ENV] }, archive);
  } finally {
    await rm(work, { recursive: true, force: true });
  }
  // Archives of earlier versions are never imported again.
  for (const entry of await readdir(dir))
    if (entry.startsWith(`task-${kind}-`) && path.join(dir, entry) !== archive)
      await rm(path.join(dir, entry), { force: true });
  log(`Built ${TASK_IMAGES[kind]} in ${((Date.now() - started) / 1000).toFixed(1)} s: ${archive}`);
  return archive;
}

const hostRecordSchema = z.object({ containerdSocket: z.string() });

/** The containerd socket of the real node of the cluster whose admin kubeconfig is `kubeconfig`. */
export function realNodeContainerdSocket(kubeconfig: string): string {
  const file = path.join(path.dirname(kubeconfig), "real-node", "host.json");
  if (!existsSync(file))
    throw new Error(
      `${file} is missing: the task images need a real node (npm run cluster:up -- --node real)`,
    );
  return hostRecordSchema.parse(JSON.parse(readFileSync(file, "utf8"))).containerdSocket;
}

/**
 * Builds what is missing and imports into the real node's containerd (namespace k8s.io, where the
 * kubelet looks) every task image it does not have yet. Returns the images' names by kind.
 */
export async function importTaskImages(
  kubeconfig: string,
  log: (message: string) => void,
): Promise<typeof TASK_IMAGES> {
  const socket = realNodeContainerdSocket(kubeconfig);
  const ctr = (args: string[]) =>
    run("ctr", ["--address", socket, "--namespace", "k8s.io", ...args], { maxBuffer: 1 << 24 });
  const { stdout } = await ctr(["images", "list", "--quiet"]);
  const present = new Set(stdout.split("\n"));
  for (const kind of TASK_IMAGE_KINDS) {
    const archive = await taskImageArchive(kind, log);
    // The label says which build the node has: a changed spin.c is imported again.
    const key = path.basename(archive);
    if (present.has(TASK_IMAGES[kind])) {
      const { stdout: labels } = await ctr(["images", "list", `name==${TASK_IMAGES[kind]}`]);
      if (labels.includes(`playbook.test/build=${key}`)) continue;
    }
    await ctr(["images", "import", archive]);
    await ctr(["images", "label", TASK_IMAGES[kind], `playbook.test/build=${key}`]);
    log(`Imported ${TASK_IMAGES[kind]} into the real node`);
  }
  return TASK_IMAGES;
}

/**
 * The two ways the agent reaches a pod's task containers (issue 32), for the real-node suites:
 * the runner image as an image volume (what --agent-delivery auto takes on the node's containerd
 * 2.x) and the runner container's postStart hook (forced); `agentDir` holds the agent and busybox.
 */
export const AGENT_LAYOUTS = [
  { setting: "auto", delivery: "image-volume", agentDir: "/playbook/agent/usr/local/lib/playbook" },
  { setting: "post-start", delivery: "post-start", agentDir: "/playbook/agent" },
] as const;

export type AgentLayout = (typeof AGENT_LAYOUTS)[number];

/** A layout by the delivery it names: each real-node suite has a file per layout, run side by side. */
export function agentLayout(delivery: AgentLayout["delivery"]): AgentLayout {
  const layout = AGENT_LAYOUTS.find((candidate) => candidate.delivery === delivery);
  if (!layout) throw new Error(`no agent layout delivers by ${delivery}`);
  return layout;
}
