// An agent image of someone else's making, for the foreign-pod tests on the real node (issue 41
// item 5): the project's own agent (the test build of agent/agent.c), started by a script of the
// same name that has it run every task with /bin/true in place of the shell, so that every task
// "succeeds" without running. A pod whose agent volume is this image instead of the runner's
// passes the runner's key and user proof (its agent is the real agent, the container's own
// process) and its runner reports Succeeded for tasks that never ran.
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { chmod, copyFile, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { agentBinary } from "../agent-binary.js";
import { realNodeContainerdSocket } from "../task-images.js";
import { imageCacheDir, writeOciArchive } from "./images.js";

const run = promisify(execFile);

export const FOREIGN_AGENT_IMAGE = "localhost/playbook-test/foreign-agent:1";

/** Runs the real agent beside it, with every task's shell replaced by /bin/true (the task image's). */
const WRAPPER = [
  "#!/bin/sh",
  "export PLAYBOOK_AGENT_SHELL=/bin/true",
  // biome-ignore lint/suspicious/noTemplateCurlyInString: a shell parameter expansion
  'exec "${0%/*}/real-agent" "$@"',
  "",
].join("\n");

/**
 * Where a task container runs the agent from its agent volume: the image's root under post-start
 * (/playbook/agent/agent), the runner image's own path under image-volume.
 */
const AGENT_DIRS = [".", "usr/local/lib/playbook"];

/** Builds (once per agent and script) and imports the image into the real node; returns its name. */
export async function importForeignAgentImage(
  kubeconfig: string,
  log: (message: string) => void,
): Promise<string> {
  const { agent } = agentBinary();
  const key = createHash("sha256").update(WRAPPER).update(readFileSync(agent)).digest("hex").slice(0, 12);
  const archive = path.join(imageCacheDir(), `foreign-agent-${key}.oci.tar`);
  if (!existsSync(archive)) {
    await mkdir(path.dirname(archive), { recursive: true });
    const work = await mkdtemp(path.join(os.tmpdir(), "playbook-foreign-agent-"));
    try {
      const rootfs = path.join(work, "rootfs");
      for (const dir of AGENT_DIRS) {
        const at = path.join(rootfs, dir);
        await mkdir(at, { recursive: true });
        await writeFile(path.join(at, "agent"), WRAPPER);
        await chmod(path.join(at, "agent"), 0o755);
        await copyFile(agent, path.join(at, "real-agent"));
        await chmod(path.join(at, "real-agent"), 0o755);
      }
      await writeOciArchive(rootfs, FOREIGN_AGENT_IMAGE, {}, archive);
    } finally {
      await rm(work, { recursive: true, force: true });
    }
    log(`Built ${FOREIGN_AGENT_IMAGE}: ${archive}`);
  }
  const socket = realNodeContainerdSocket(kubeconfig);
  const ctr = (args: string[]) =>
    run("ctr", ["--address", socket, "--namespace", "k8s.io", ...args], { maxBuffer: 1 << 24 });
  const { stdout } = await ctr(["images", "list", `name==${FOREIGN_AGENT_IMAGE}`]);
  if (!stdout.includes(`playbook.test/build=${path.basename(archive)}`)) {
    await ctr(["images", "import", archive]);
    await ctr(["images", "label", FOREIGN_AGENT_IMAGE, `playbook.test/build=${path.basename(archive)}`]);
    log(`Imported ${FOREIGN_AGENT_IMAGE} into the real node`);
  }
  return FOREIGN_AGENT_IMAGE;
}
