// The small images a real node needs and no registry here can serve: a pause image for pod
// sandboxes (compiled from pause.c beside this file) and a busybox image (Debian's static
// busybox). Each is written as an OCI image archive, which `ctr images import` takes.
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { createReadStream, existsSync } from "node:fs";
import { chmod, mkdir, mkdtemp, readdir, rename, rm, stat, symlink, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { repoRoot } from "../binaries.js";
import { type ContainerEngine, containerEngine, engineRun, imageExists } from "../container-engine.js";
import { imageName, imageTag } from "../image.js";
import { aptCouldNotFetch, aptUpdate, updateStaleAptLists } from "../prerequisites.js";

const run = promisify(execFile);

/** Names the node imports the local images under; the pause one is containerd's sandbox_image. */
export const PAUSE_IMAGE = "localhost/playbook-dev/pause:3.10";
export const BUSYBOX_IMAGE = "localhost/playbook-dev/busybox:1.35";

/** The commands busybox answers to in its image: enough for test pods. */
const BUSYBOX_APPLETS = [
  "cat",
  "echo",
  "env",
  "false",
  "grep",
  "id",
  "kill",
  "ls",
  "mkdir",
  "ps",
  "rm",
  "sh",
  "sleep",
  "test",
  "touch",
  "trap",
  "true",
  "wc",
];

export interface ImageConfig {
  entrypoint?: string[];
  cmd?: string[];
  env?: string[];
  user?: string;
}

async function sha256File(file: string): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
  return hash.digest("hex");
}

const sha256 = (data: string): string => createHash("sha256").update(data).digest("hex");

function ociArch(): string {
  if (process.arch === "x64") return "amd64";
  if (process.arch === "arm64") return "arm64";
  return process.arch;
}

/**
 * Writes `rootfs` as a one-layer OCI image archive named `name` (an uncompressed layer, owned by
 * root, timestamps zeroed so the same files give the same digest).
 */
export async function writeOciArchive(
  rootfs: string,
  name: string,
  config: ImageConfig,
  archive: string,
): Promise<void> {
  const layout = await mkdtemp(path.join(path.dirname(archive), ".oci-"));
  try {
    const blobs = path.join(layout, "blobs", "sha256");
    await mkdir(blobs, { recursive: true });
    const layerTar = path.join(layout, "layer.tar");
    await run("tar", [
      ...["--sort=name", "--owner=0", "--group=0", "--numeric-owner", "--mtime=@0"],
      ...["-C", rootfs, "-cf", layerTar, "."],
    ]);
    const layerDigest = await sha256File(layerTar);
    const layerSize = (await stat(layerTar)).size;
    await rename(layerTar, path.join(blobs, layerDigest));

    const blob = async (content: string): Promise<{ digest: string; size: number }> => {
      const digest = sha256(content);
      await writeFile(path.join(blobs, digest), content);
      return { digest: `sha256:${digest}`, size: Buffer.byteLength(content) };
    };
    const imageConfig = await blob(
      JSON.stringify({
        architecture: ociArch(),
        os: "linux",
        config: {
          ...(config.entrypoint ? { Entrypoint: config.entrypoint } : {}),
          ...(config.cmd ? { Cmd: config.cmd } : {}),
          Env: config.env ?? ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
          ...(config.user ? { User: config.user } : {}),
        },
        rootfs: { type: "layers", diff_ids: [`sha256:${layerDigest}`] },
      }),
    );
    const manifest = await blob(
      JSON.stringify({
        schemaVersion: 2,
        mediaType: "application/vnd.oci.image.manifest.v1+json",
        config: { mediaType: "application/vnd.oci.image.config.v1+json", ...imageConfig },
        layers: [
          {
            mediaType: "application/vnd.oci.image.layer.v1.tar",
            digest: `sha256:${layerDigest}`,
            size: layerSize,
          },
        ],
      }),
    );
    await writeFile(
      path.join(layout, "index.json"),
      JSON.stringify({
        schemaVersion: 2,
        mediaType: "application/vnd.oci.image.index.v1+json",
        manifests: [
          {
            mediaType: "application/vnd.oci.image.manifest.v1+json",
            ...manifest,
            platform: { architecture: ociArch(), os: "linux" },
            annotations: {
              "io.containerd.image.name": name,
              "org.opencontainers.image.ref.name": name.slice(name.lastIndexOf(":") + 1),
            },
          },
        ],
      }),
    );
    await writeFile(path.join(layout, "oci-layout"), JSON.stringify({ imageLayoutVersion: "1.0.0" }));
    const partial = `${archive}.partial`;
    await run("tar", ["-C", layout, "-cf", partial, "oci-layout", "index.json", "blobs"]);
    await rename(partial, archive);
  } finally {
    await rm(layout, { recursive: true, force: true });
  }
}

/** Where built image archives are kept between clusters (beside the tools' binaries). */
export function imageCacheDir(): string {
  const root =
    process.env.PLAYBOOK_TOOLS_CACHE ??
    path.join(process.env.XDG_CACHE_HOME ?? path.join(os.homedir(), ".cache"), "playbook-controller", "bin");
  return path.join(path.dirname(root), "images");
}

async function withRootfs(build: (rootfs: string, work: string) => Promise<void>): Promise<void> {
  const work = await mkdtemp(path.join(os.tmpdir(), "playbook-image-"));
  try {
    const rootfs = path.join(work, "rootfs");
    await mkdir(rootfs);
    await build(rootfs, work);
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

/** The pause image: pause.c compiled static with the C compiler here (gcc or cc). */
export async function pauseImageArchive(): Promise<string> {
  const archive = path.join(imageCacheDir(), "pause-3.10.oci.tar");
  if (existsSync(archive)) return archive;
  await mkdir(path.dirname(archive), { recursive: true });
  const source = path.join(repoRoot(), "test", "harness", "real-node", "pause.c");
  await withRootfs(async (rootfs) => {
    const binary = path.join(rootfs, "pause");
    try {
      await run("cc", ["-static", "-Os", "-s", "-o", binary, source]);
    } catch (error) {
      const { stderr } = error as { stderr?: string };
      throw new Error(
        `could not compile the pause image's program (needs a C compiler and a static libc: apt-get install gcc libc6-dev): ${stderr ?? error}`,
        { cause: error },
      );
    }
    await writeOciArchive(rootfs, PAUSE_IMAGE, { entrypoint: ["/pause"], user: "65535:65535" }, archive);
  });
  return archive;
}

/**
 * The busybox image: Debian's busybox-static, fetched with `apt-get download` (nothing installed).
 * As root, stale package lists are updated first, and a download that could not fetch is tried
 * once more after an update, as the harness's installs do (test/harness/prerequisites.ts).
 */
export async function busyboxImageArchive(log: (message: string) => void): Promise<string> {
  const archive = path.join(imageCacheDir(), "busybox-1.35.oci.tar");
  if (existsSync(archive)) return archive;
  await mkdir(path.dirname(archive), { recursive: true });
  await withRootfs(async (rootfs, work) => {
    const debs = path.join(work, "deb");
    await mkdir(debs);
    const root = process.getuid?.() === 0;
    const download = async (): Promise<string | undefined> => {
      try {
        await run("apt-get", ["download", "busybox-static"], { cwd: debs });
        return undefined;
      } catch (error) {
        return (error as { stderr?: string }).stderr || String(error);
      }
    };
    if (root) updateStaleAptLists(log);
    let failure = await download();
    if (failure && root && aptCouldNotFetch(failure)) {
      log("apt-get download busybox-static could not fetch: running apt-get update and trying once more");
      aptUpdate(log);
      failure = await download();
    }
    if (failure) throw new Error(`apt-get download busybox-static failed: ${failure}`);
    const [deb] = (await readdir(debs)).filter((f) => f.endsWith(".deb"));
    if (!deb) throw new Error("apt-get download busybox-static left no .deb");
    const unpacked = path.join(work, "unpacked");
    await run("dpkg-deb", ["-x", path.join(debs, deb), unpacked]);
    for (const dir of ["bin", "tmp", "etc", "root"]) await mkdir(path.join(rootfs, dir));
    await chmod(path.join(rootfs, "tmp"), 0o1777);
    await rename(path.join(unpacked, "bin", "busybox"), path.join(rootfs, "bin", "busybox"));
    for (const applet of BUSYBOX_APPLETS) await symlink("busybox", path.join(rootfs, "bin", applet));
    await writeFile(path.join(rootfs, "etc", "passwd"), "root:x:0:0:root:/root:/bin/sh\n");
    await writeFile(path.join(rootfs, "etc", "group"), "root:x:0:\n");
    await writeOciArchive(rootfs, BUSYBOX_IMAGE, { cmd: ["sh"] }, archive);
  });
  return archive;
}

/** The project's image as the real node knows it: the runner image of its Playbooks' pods. */
export function projectImageName(): string {
  return `localhost/${imageName()}`;
}

/**
 * An OCI archive of the project's image (`npm run image:build`): PLAYBOOK_IMAGE_ARCHIVE when set,
 * else saved from the container engine's storage (once per image id); undefined when it is not built.
 */
export async function projectImageArchive(log: (message: string) => void): Promise<string | undefined> {
  const fromEnv = process.env.PLAYBOOK_IMAGE_ARCHIVE;
  if (fromEnv) return path.resolve(fromEnv);
  const name = projectImageName();
  let engine: ContainerEngine;
  try {
    engine = containerEngine();
  } catch {
    log(`No container engine, so no ${name} for the real node (npm run image:build makes it)`);
    return undefined;
  }
  if (!(await imageExists(engine, name))) {
    log(`${name} is not built (npm run image:build); pods that run it cannot start on the real node`);
    return undefined;
  }
  const id = (await engineRun(engine, ["image", "inspect", "--format", "{{.Id}}", name])).trim();
  // Keyed by the tag as well as the id: the same build under two tags (PLAYBOOK_IMAGE_TAG's and the
  // version's) has one id, and an archive carries the one name it was saved under.
  const archive = path.join(
    imageCacheDir(),
    `playbook-controller-${imageTag()}-${id.replace(/^sha256:/, "").slice(0, 16)}.oci.tar`,
  );
  if (existsSync(archive)) return archive;
  await mkdir(path.dirname(archive), { recursive: true });
  const partial = `${archive}.partial`;
  await rm(partial, { force: true });
  await engineRun(engine, ["save", "--format", "oci-archive", "-o", partial, name]);
  await rename(partial, archive);
  // Archives of earlier builds are never imported again.
  for (const entry of await readdir(path.dirname(archive)))
    if (
      /^playbook-controller-(.+-)?[0-9a-f]+\.oci\.tar$/.test(entry) &&
      path.join(path.dirname(archive), entry) !== archive
    )
      await rm(path.join(path.dirname(archive), entry), { force: true });
  log(`Saved ${name} to ${archive}`);
  return archive;
}
