// The project's image: `playbook-controller:<version>` built from the Dockerfile, and, where the
// official base image cannot be pulled, a stand-in for it made on this machine. The base is
// pulled wherever the registry answers a quick probe (PLAYBOOK_IMAGE_PULL=0 never pulls, =1 or
// --pull always does); the stand-in is made only where it does not.
import { execFile, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import {
  cpSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { z } from "zod";
import { repoRoot } from "./binaries.js";
import { type ContainerEngine, engineRun, imageExists } from "./container-engine.js";

const run = promisify(execFile);

/** The Dockerfile's base: the stand-in takes this name, so the Dockerfile stays as it is. */
export const BASE_IMAGE = "docker.io/library/node:24-bookworm-slim";
/** A label only the stand-in carries, so it is never mistaken for the official image. */
export const STAND_IN_LABEL = "dev.playbook.base-stand-in";

const packageJson = z.object({ version: z.string(), devDependencies: z.record(z.string(), z.string()) });

function readPackageJson(): z.infer<typeof packageJson> {
  return packageJson.parse(JSON.parse(readFileSync(path.join(repoRoot(), "package.json"), "utf8")));
}

/** The variable that names another tag than the version (a test's image, never the shared one). */
export const IMAGE_TAG_VARIABLE = "PLAYBOOK_IMAGE_TAG";

/** The project's image tag: PLAYBOOK_IMAGE_TAG when set, else the version from package.json. */
export function imageTag(env: NodeJS.ProcessEnv = process.env): string {
  const tag = env[IMAGE_TAG_VARIABLE];
  if (tag === undefined || tag === "") return readPackageJson().version;
  if (!/^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/.test(tag))
    throw new Error(
      `${IMAGE_TAG_VARIABLE} is ${JSON.stringify(tag)}: an image tag is 1 to 128 letters, digits, _ . and - (not starting with . or -)`,
    );
  return tag;
}

/** playbook-controller:<version from package.json>, or PLAYBOOK_IMAGE_TAG's tag. */
export function imageName(): string {
  return `playbook-controller:${imageTag()}`;
}

export type Log = (message: string) => void;

/** The label holding sourceHash() of what an image was built from. */
export const SOURCE_LABEL = "dev.playbook.source";

/**
 * A digest of what the Dockerfile reads (the files .dockerignore lets in, and the Dockerfile):
 * an image whose label differs was built from other sources and is stale.
 */
export function sourceHash(): string {
  const root = repoRoot();
  const files = [
    ".dockerignore",
    "Dockerfile",
    "package.json",
    "package-lock.json",
    "tsconfig.json",
    "tsconfig.build.json",
    "LICENSE",
    "scripts/bundle-cli.ts",
    "scripts/third-party-notices.ts",
    "scripts/image-sbom.ts",
    "agent/agent.c",
    "tools/build-agent.sh",
  ];
  const walk = (dir: string): string[] =>
    readdirSync(path.join(root, dir), { withFileTypes: true }).flatMap((entry) =>
      entry.isDirectory() ? walk(path.join(dir, entry.name)) : [path.join(dir, entry.name)],
    );
  const hash = createHash("sha256");
  for (const file of [...files, ...walk("src")].sort()) {
    hash.update(`${file}\0`);
    hash.update(readFileSync(path.join(root, file)));
    hash.update("\0");
  }
  return hash.digest("hex").slice(0, 16);
}

/** Why the engine's image of this checkout must be built: missing, or built from other sources; undefined when current. */
export async function imageStaleness(engine: ContainerEngine): Promise<string | undefined> {
  const name = imageName();
  if (!(await imageExists(engine, name))) return `${name} is not built yet`;
  const label = (
    await engineRun(engine, [
      "image",
      "inspect",
      "--format",
      `{{ index .Config.Labels "${SOURCE_LABEL}" }}`,
      name,
    ])
  ).trim();
  return label === sourceHash() ? undefined : `${name} was built from other sources than this checkout's`;
}

function baseCacheDir(): string {
  const cache = process.env.XDG_CACHE_HOME || path.join(os.homedir(), ".cache");
  return path.resolve(process.env.PLAYBOOK_BASE_CACHE || path.join(cache, "playbook-controller", "base"));
}

/** Runs a command with its output on our stderr (long steps show their progress). */
function runLoud(command: string, args: string[], env: NodeJS.ProcessEnv = process.env): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { env, stdio: ["ignore", process.stderr, process.stderr] });
    child.on("error", reject);
    child.on("close", (code) =>
      code === 0 ? resolve() : reject(new Error(`${command} ${args.join(" ")} exited with ${code}`)),
    );
  });
}

// What the official slim images leave out (debuerreotype's slimify): docs, man pages, locales.
const DPKG_SLIM = `path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
`;

const DEBIAN_SOURCES = (mirror: string, security: string) => `Types: deb
URIs: ${mirror}
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${security}
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
`;

/**
 * A minimal Debian bookworm root (`debootstrap --variant=minbase`), slimmed as the official slim
 * images are, cached under ~/.cache/playbook-controller/base: about a minute the first time.
 */
export async function debianRoot(log: Log): Promise<string> {
  const root = path.join(baseCacheDir(), "bookworm-minbase");
  const done = `${root}.done`;
  if (existsSync(done)) return root;
  if (process.getuid?.() !== 0) throw new Error("making the base stand-in needs root (debootstrap)");
  const mirror = process.env.PLAYBOOK_DEBIAN_MIRROR || "http://deb.debian.org/debian";
  const security = process.env.PLAYBOOK_DEBIAN_SECURITY_MIRROR || "http://deb.debian.org/debian-security";
  rmSync(root, { recursive: true, force: true });
  mkdirSync(root, { recursive: true });
  log(`debootstrap --variant=minbase bookworm from ${mirror} into ${root}`);
  const started = Date.now();
  await runLoud("debootstrap", ["--variant=minbase", "bookworm", root, mirror]);
  mkdirSync(path.join(root, "etc/dpkg/dpkg.cfg.d"), { recursive: true });
  writeFileSync(path.join(root, "etc/dpkg/dpkg.cfg.d/docker-slim"), DPKG_SLIM);
  // apt in a container keeps no package cache (as the official images' docker-clean does).
  writeFileSync(
    path.join(root, "etc/apt/apt.conf.d/docker-clean"),
    'DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };\n' +
      'Dir::Cache::pkgcache ""; Dir::Cache::srcpkgcache "";\n',
  );
  rmSync(path.join(root, "etc/apt/sources.list"), { force: true });
  writeFileSync(path.join(root, "etc/apt/sources.list.d/debian.sources"), DEBIAN_SOURCES(mirror, security));
  await run("sh", [
    "-c",
    `cd "$1" && find usr/share/doc -mindepth 1 -not -name copyright -not -type d -delete && find usr/share/doc -depth -mindepth 1 -type d -empty -delete;
     rm -rf usr/share/man/* usr/share/groff/* usr/share/info/* usr/share/lintian/* usr/share/linda/* usr/share/locale/* \
       var/lib/apt/lists/* var/cache/apt/* var/cache/debconf/*-old var/log/* dev/* proc/* sys/* tmp/* run/*;
     : > etc/resolv.conf; : > etc/hostname`,
    "sh",
    root,
  ]);
  writeFileSync(done, `${new Date().toISOString()} ${((Date.now() - started) / 1000).toFixed(0)}s\n`);
  log(`Debian root made in ${((Date.now() - started) / 1000).toFixed(0)} s`);
  return root;
}

/** npm's own package folder (the one running us under `npm run`, else the one on PATH). */
async function npmPackageDir(): Promise<string> {
  const cli = process.env.npm_execpath || (await run("sh", ["-c", "command -v npm"])).stdout.trim();
  let dir = path.dirname(realpathSync(cli));
  while (!existsSync(path.join(dir, "package.json"))) dir = path.dirname(dir);
  return dir;
}

/**
 * Makes and imports the stand-in for node:24-bookworm-slim: the Debian root above plus the
 * Node binary of the `node` devDependency (the same Node 24 build the official image ships) and
 * npm, tagged with the official name and labelled STAND_IN_LABEL.
 */
export async function makeBaseStandIn(engine: ContainerEngine, log: Log): Promise<void> {
  const nodeVersion = readPackageJson().devDependencies.node;
  const nodeBinary = path.join(repoRoot(), "node_modules", "node", "bin", "node");
  if (!nodeVersion || !existsSync(nodeBinary)) {
    throw new Error(
      "node_modules/node/bin/node is missing: run npm ci first (the `node` devDependency ships it)",
    );
  }
  const { stdout } = await run(nodeBinary, ["--version"]);
  if (stdout.trim() !== `v${nodeVersion}`) {
    throw new Error(
      `node_modules/node/bin/node is ${stdout.trim()}, package.json wants ${nodeVersion}: run npm ci`,
    );
  }
  const root = await debianRoot(log);
  const layer = path.join(baseCacheDir(), `node-${nodeVersion}`);
  rmSync(layer, { recursive: true, force: true });
  mkdirSync(path.join(layer, "usr/local/bin"), { recursive: true });
  mkdirSync(path.join(layer, "usr/local/lib/node_modules"), { recursive: true });
  cpSync(nodeBinary, path.join(layer, "usr/local/bin/node"));
  const npmDir = await npmPackageDir();
  cpSync(npmDir, path.join(layer, "usr/local/lib/node_modules/npm"), { recursive: true });
  symlinkSync("../lib/node_modules/npm/bin/npm-cli.js", path.join(layer, "usr/local/bin/npm"));
  symlinkSync("../lib/node_modules/npm/bin/npx-cli.js", path.join(layer, "usr/local/bin/npx"));
  const archive = path.join(baseCacheDir(), `node-${nodeVersion}-bookworm-slim.tar`);
  // Only the new paths from the layer: the importer refuses a tar that names a path twice.
  const added = [
    "./usr/local/bin/node",
    "./usr/local/bin/npm",
    "./usr/local/bin/npx",
    "./usr/local/lib/node_modules",
  ];
  await run("tar", ["--numeric-owner", "-cf", archive, "-C", root, ".", "-C", layer, ...added]);
  const npmVersion = z
    .object({ version: z.string() })
    .parse(JSON.parse(readFileSync(path.join(npmDir, "package.json"), "utf8"))).version;
  await engineRun(engine, [
    "import",
    "--change",
    `ENV NODE_VERSION=${nodeVersion}`,
    "--change",
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "--change",
    `LABEL ${STAND_IN_LABEL}="Debian bookworm minbase + Node ${nodeVersion} from npm's node package + npm ${npmVersion}"`,
    "--change",
    'CMD ["node"]',
    archive,
    BASE_IMAGE,
  ]);
  rmSync(archive, { force: true });
  rmSync(layer, { recursive: true, force: true });
}

/** What is in local storage under BASE_IMAGE: the official image, the stand-in, or nothing. */
export type LocalBase = "official" | "stand-in" | "none";

/** How the base is got: asked for (--pull, PLAYBOOK_IMAGE_PULL=1), refused (PLAYBOOK_IMAGE_PULL=0), or as the registry answers. */
export type PullMode = "always" | "never" | "auto";

export interface BaseDecision {
  action: "use-local" | "pull" | "stand-in";
  /** One line saying why, for the build's log. */
  why: string;
}

/**
 * Where the Dockerfile's base comes from: the official image is pulled wherever a registry
 * answers (replacing a stand-in made earlier), the stand-in is made only where none does, and an
 * image already in local storage is used when nothing better can be had. `registry` is the
 * probe's answer (undefined when it was not asked: pull never, or the official image is there).
 */
export function decideBase(options: {
  local: LocalBase;
  pull: PullMode;
  registry?: { answers: boolean; detail: string };
}): BaseDecision {
  const { local, pull, registry } = options;
  if (pull === "always")
    return { action: "pull", why: `pulling ${BASE_IMAGE} as asked (--pull or PLAYBOOK_IMAGE_PULL=1)` };
  if (local === "official")
    return { action: "use-local", why: `${BASE_IMAGE} (the official image) is in local storage` };
  if (pull === "auto" && registry?.answers) {
    return {
      action: "pull",
      why: `the registry answers (${registry.detail}): pulling the official ${BASE_IMAGE}${local === "stand-in" ? " in place of the local stand-in" : ""}`,
    };
  }
  const because =
    pull === "never"
      ? "PLAYBOOK_IMAGE_PULL=0 declines pulling"
      : `no registry answers (${registry?.detail ?? "not asked"})`;
  if (local === "stand-in")
    return { action: "use-local", why: `${because}: using the stand-in for ${BASE_IMAGE} made earlier` };
  return {
    action: "stand-in",
    why:
      `${because}: making a stand-in for ${BASE_IMAGE} (Debian bookworm minbase from debootstrap + the Node binary ` +
      "of npm's node package), tagged with the official name",
  };
}

/** PLAYBOOK_IMAGE_PULL=1 (or --pull) always pulls, PLAYBOOK_IMAGE_PULL=0 never does, unset: as the registry answers. */
export function pullMode(flag: boolean, env: NodeJS.ProcessEnv = process.env): PullMode {
  if (flag || env.PLAYBOOK_IMAGE_PULL === "1" || env.PLAYBOOK_IMAGE_PULL === "true") return "always";
  if (env.PLAYBOOK_IMAGE_PULL === "0" || env.PLAYBOOK_IMAGE_PULL === "false") return "never";
  return "auto";
}

/** The registry BASE_IMAGE is pulled from, probed before pulling: PLAYBOOK_BASE_REGISTRY overrides it. */
export function baseRegistryUrl(env: NodeJS.ProcessEnv = process.env): string {
  return `https://${env.PLAYBOOK_BASE_REGISTRY || "registry-1.docker.io"}/v2/`;
}

/** How long the registry has to answer before the stand-in is made instead. */
export const REGISTRY_PROBE_TIMEOUT_MS = 5_000;

/**
 * Whether the registry answers: any HTTP response from its /v2/ endpoint (401 included: it asks
 * for a token) within the timeout. No answer, a DNS failure or a refused connection: it does not.
 */
export async function probeRegistry(
  url = baseRegistryUrl(),
  timeoutMs = REGISTRY_PROBE_TIMEOUT_MS,
): Promise<{ answers: boolean; detail: string }> {
  const started = Date.now();
  try {
    const response = await fetch(url, {
      method: "GET",
      signal: AbortSignal.timeout(timeoutMs),
      redirect: "manual",
    });
    await response.body?.cancel();
    return { answers: true, detail: `${url} answered HTTP ${response.status} in ${Date.now() - started} ms` };
  } catch (error) {
    const cause = (error as { cause?: { code?: string; message?: string } }).cause;
    const reason =
      (error as Error).name === "TimeoutError"
        ? `no answer within ${timeoutMs / 1000} s`
        : (cause?.code ?? cause?.message ?? (error as Error).message);
    return { answers: false, detail: `${url}: ${reason}` };
  }
}

/** What BASE_IMAGE in local storage is: the official image, the stand-in (its label), or nothing. */
export async function localBase(engine: ContainerEngine): Promise<LocalBase> {
  if (!(await imageExists(engine, BASE_IMAGE))) return "none";
  const label = (
    await engineRun(engine, [
      "image",
      "inspect",
      "--format",
      `{{ index .Config.Labels "${STAND_IN_LABEL}" }}`,
      BASE_IMAGE,
    ])
  ).trim();
  return label && label !== "<no value>" ? "stand-in" : "official";
}

/**
 * Makes sure the Dockerfile's base is in local storage, as decideBase says: pulled where the
 * registry answers, else the stand-in, said in one line on stderr through log. A pull that fails
 * where it was not asked for falls back to the stand-in.
 */
export async function ensureBaseImage(
  engine: ContainerEngine,
  log: Log,
  pull: PullMode = "auto",
): Promise<void> {
  const local = await localBase(engine);
  const registry = pull === "auto" && local !== "official" ? await probeRegistry() : undefined;
  const decision = decideBase({ local, pull, ...(registry ? { registry } : {}) });
  log(decision.why);
  if (decision.action === "use-local") return;
  if (decision.action === "pull") {
    try {
      await runLoud(engine.command, ["pull", BASE_IMAGE], engine.env);
      return;
    } catch (error) {
      if (pull === "always" || local === "stand-in") throw error;
      log(`pulling ${BASE_IMAGE} failed (${(error as Error).message}): making the stand-in instead`);
    }
  }
  await makeBaseStandIn(engine, log);
}

/**
 * Where this machine reaches registries through a TLS-intercepting proxy, it names the proxy's CA
 * (NODE_EXTRA_CA_CERTS, as here, or PLAYBOOK_BUILD_CA_FILE): npm in the build stage then trusts it
 * through a global npmrc mounted for the build only (podman build -v), never copied into a layer.
 */
function buildCaMounts(log: Log): string[] {
  const caFile = process.env.PLAYBOOK_BUILD_CA_FILE || process.env.NODE_EXTRA_CA_CERTS;
  if (!caFile || !existsSync(caFile)) return [];
  const npmrc = path.join(baseCacheDir(), "build-npmrc");
  mkdirSync(baseCacheDir(), { recursive: true });
  writeFileSync(npmrc, "cafile=/run/playbook-build-ca.crt\n");
  log(
    `npm in the build trusts ${caFile} (NODE_EXTRA_CA_CERTS or PLAYBOOK_BUILD_CA_FILE), mounted for the build only`,
  );
  return ["-v", `${caFile}:/run/playbook-build-ca.crt:ro`, "-v", `${npmrc}:/usr/local/etc/npmrc:ro`];
}

/** Builds the Dockerfile as imageName() on the base ensureBaseImage gets. */
export async function buildImage(
  engine: ContainerEngine,
  options: { log: Log; pull?: PullMode; archive?: string },
): Promise<string> {
  const name = imageName();
  await ensureBaseImage(engine, options.log, options.pull ?? pullMode(false));
  options.log(`building ${name} with ${engine.kind}`);
  // Host networking: RUN steps reach Debian's mirror and npm's registry as this machine does,
  // with no bridge or NAT set up for them.
  const args = [
    "build",
    "--network",
    "host",
    "--label",
    `${SOURCE_LABEL}=${sourceHash()}`,
    "-t",
    name,
    "-f",
    "Dockerfile",
  ];
  if (engine.kind === "podman") args.push("--pull=never", ...buildCaMounts(options.log));
  args.push(repoRoot());
  await runLoud(engine.command, args, engine.env);
  if (options.archive) {
    const file = path.resolve(options.archive);
    rmSync(file, { force: true });
    options.log(`saving ${name} to ${file}`);
    await engineRun(
      engine,
      engine.kind === "podman"
        ? ["save", "--format", "oci-archive", "-o", file, name]
        : ["save", "-o", file, name],
    );
  }
  return name;
}

/** The image's size in bytes, as `image inspect` reports it. */
export async function imageSize(engine: ContainerEngine, name: string): Promise<number> {
  return Number((await engineRun(engine, ["image", "inspect", "--format", "{{.Size}}", name])).trim());
}
