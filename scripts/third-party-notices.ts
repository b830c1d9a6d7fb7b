// The licences of the npm packages the bundle inlines. dist/bin/*.js carries their code with no
// node_modules beside it, so their licence texts must travel with it: bundle-cli.ts calls this
// after its builds. The package list comes from the bundle's own source maps (every module
// rolldown kept), not from package.json, so a package that tree-shaking dropped is not named and
// one that a new import pulls in cannot be forgotten. It writes THIRD-PARTY-NOTICES.txt (each
// package's name, version, licence id and full licence text) and sbom.cdx.json (a CycloneDX 1.5
// list of the same packages) beside the bundle, and fails the build when a bundled package has no
// licence file or a licence outside the permissive ones below.
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { z } from "zod";

export const NOTICES_FILE = "THIRD-PARTY-NOTICES.txt";
export const SBOM_FILE = "sbom.cdx.json";

/** The licences the bundle may contain: permissive ones that ask only for their notice. */
export const ALLOWED_LICENSES = new Set([
  "MIT",
  "ISC",
  "Apache-2.0",
  "BSD-2-Clause",
  "BSD-3-Clause",
  "0BSD",
  "BlueOak-1.0.0",
]);

export interface BundledPackage {
  name: string;
  version: string;
  license: string;
  /** The package's folder, absolute. */
  dir: string;
  /** Its licence file's name in that folder, and the text. */
  licenseFile: string;
  licenseText: string;
  /** An Apache-2.0 package's NOTICE file, which its licence asks to pass on, if it has one. */
  noticeText?: string;
}

const PackageJson = z.object({
  name: z.string().min(1).optional(),
  version: z.string().min(1).optional(),
  license: z.string().min(1).optional(),
  repository: z.union([z.string(), z.looseObject({ url: z.string() })]).optional(),
});

/** The package's repository URL, for a package of a monorepo whose own folder ships no licence file. */
function repositoryOf(manifest: z.infer<typeof PackageJson>): string | undefined {
  const repo = manifest.repository;
  return typeof repo === "string" ? repo : repo?.url;
}

const LICENSE_FILE = /^(licen[cs]e|copying)(\b|[-_.])/i;

/**
 * The licence file of another bundled package from the same repository under the same licence
 * id: a few packages of a monorepo (@aws-sdk's internal ones) are published without the
 * repository's LICENSE, which covers them as it covers their siblings.
 */
function siblingLicense(
  dirs: Iterable<string>,
  repository: string | undefined,
  license: string,
): { dir: string; file: string; name?: string } | undefined {
  if (repository === undefined) return undefined;
  for (const dir of dirs) {
    const manifestPath = path.join(dir, "package.json");
    if (!existsSync(manifestPath)) continue;
    const sibling = PackageJson.safeParse(JSON.parse(readFileSync(manifestPath, "utf8"))).data;
    if (!sibling || sibling.license !== license || repositoryOf(sibling) !== repository) continue;
    const file = readdirSync(dir)
      .filter((f) => LICENSE_FILE.test(f))
      .sort()[0];
    if (file !== undefined) return { dir, file, name: sibling.name ?? path.basename(dir) };
  }
  return undefined;
}

/** A file's text without the blank lines around it (a first line's indent stays). */
function readText(file: string): string {
  return readFileSync(file, "utf8")
    .replace(/^(\s*\n)+/, "")
    .trimEnd();
}

/** The folder of the package that holds `file`: the folder after the last node_modules/ (and @scope/). */
function packageDirOf(file: string): string | undefined {
  const parts = file.split(path.sep);
  const at = parts.lastIndexOf("node_modules");
  if (at < 0 || at + 1 >= parts.length) return undefined;
  const end = parts[at + 1]?.startsWith("@") ? at + 3 : at + 2;
  return parts.slice(0, end).join(path.sep);
}

/** Every source file named by the source maps in `dir` (absolute paths). */
export function bundledSources(dir: string): string[] {
  const MapFile = z.object({ sources: z.array(z.string()) });
  return readdirSync(dir)
    .filter((file) => file.endsWith(".js.map"))
    .flatMap((file) =>
      MapFile.parse(JSON.parse(readFileSync(path.join(dir, file), "utf8"))).sources.map((source) =>
        path.resolve(dir, source),
      ),
    );
}

/** An SPDX expression's ids are all allowed (for OR, one allowed alternative is enough). */
function licenseAllowed(expression: string): boolean {
  const bare = expression.replace(/^\((.*)\)$/, "$1").trim();
  if (/\sOR\s/.test(bare)) return bare.split(/\s+OR\s+/).some((id) => licenseAllowed(id));
  if (/\sAND\s/.test(bare)) return bare.split(/\s+AND\s+/).every((id) => licenseAllowed(id));
  return ALLOWED_LICENSES.has(bare);
}

/** The packages whose modules the bundle in `dir` contains, sorted by name; throws on a bad licence. */
export function bundledPackages(dir: string): BundledPackage[] {
  const dirs = new Set(bundledSources(dir).flatMap((source) => packageDirOf(source) ?? []));
  const problems: string[] = [];
  const packages: BundledPackage[] = [];
  for (const packageDir of dirs) {
    const manifestPath = path.join(packageDir, "package.json");
    if (!existsSync(manifestPath)) {
      problems.push(`${packageDir}: no package.json`);
      continue;
    }
    const manifest = PackageJson.parse(JSON.parse(readFileSync(manifestPath, "utf8")));
    const name = manifest.name ?? path.basename(packageDir);
    if (manifest.version === undefined || manifest.license === undefined) {
      problems.push(`${name}: package.json has no ${manifest.version === undefined ? "version" : "license"}`);
      continue;
    }
    if (!licenseAllowed(manifest.license)) {
      problems.push(
        `${name}@${manifest.version}: license "${manifest.license}" is not one of ${[...ALLOWED_LICENSES].join(", ")}`,
      );
      continue;
    }
    const own = readdirSync(packageDir)
      .filter((file) => LICENSE_FILE.test(file))
      .sort()[0];
    const found =
      own === undefined
        ? siblingLicense(dirs, repositoryOf(manifest), manifest.license)
        : { dir: packageDir, file: own };
    if (found === undefined) {
      problems.push(`${name}@${manifest.version}: no LICENSE file in ${packageDir}`);
      continue;
    }
    const licenseFile =
      found.dir === packageDir ? found.file : `${found.file} of ${found.name} (the same repository)`;
    const noticeFile = readdirSync(packageDir).find((file) => /^notice(\.(txt|md))?$/i.test(file));
    packages.push({
      name,
      version: manifest.version,
      license: manifest.license,
      dir: packageDir,
      licenseFile,
      licenseText: readText(path.join(found.dir, found.file)),
      ...(noticeFile === undefined ? {} : { noticeText: readText(path.join(packageDir, noticeFile)) }),
    });
  }
  if (problems.length > 0)
    throw new Error(`bundled packages with licence problems:\n  ${problems.join("\n  ")}`);
  return packages.sort((a, b) =>
    a.name < b.name ? -1 : a.name > b.name ? 1 : a.version.localeCompare(b.version),
  );
}

export function noticesText(packages: BundledPackage[]): string {
  const head = [
    "Third-party software in the playbook command (dist/bin/*.js)",
    "",
    "The bundle contains code from the npm packages below. Each is listed with its version, its",
    "licence and the licence text from its package.",
    "",
    ...packages.map((p) => `  ${p.name}@${p.version} (${p.license})`),
  ];
  const bodies = packages.map((p) =>
    [
      `${"=".repeat(78)}`,
      `${p.name}@${p.version}`,
      `License: ${p.license}`,
      `From: ${p.licenseFile}`,
      "",
      p.licenseText,
      ...(p.noticeText === undefined ? [] : ["", "NOTICE:", "", p.noticeText]),
    ].join("\n"),
  );
  return `${[head.join("\n"), ...bodies].join("\n\n")}\n`;
}

/** A package URL for an npm package: the scope's @ is written %40. */
export function purlOf(name: string, version: string): string {
  return `pkg:npm/${name.replace(/^@/, "%40")}@${version}`;
}

export function sbom(packages: BundledPackage[], product: { name: string; version: string }): object {
  return {
    bomFormat: "CycloneDX",
    specVersion: "1.5",
    version: 1,
    metadata: {
      component: {
        type: "application",
        "bom-ref": purlOf(product.name, product.version),
        name: product.name,
        version: product.version,
        purl: purlOf(product.name, product.version),
        licenses: [{ license: { id: "Apache-2.0" } }],
      },
    },
    components: packages.map((p) => ({
      type: "library",
      "bom-ref": purlOf(p.name, p.version),
      name: p.name,
      version: p.version,
      purl: purlOf(p.name, p.version),
      licenses: ALLOWED_LICENSES.has(p.license)
        ? [{ license: { id: p.license } }]
        : [{ expression: p.license }],
    })),
  };
}

/** Writes the notices and the SBOM for the bundle in `dir`. */
export function writeThirdPartyFiles(
  dir: string,
  product: { name: string; version: string },
): BundledPackage[] {
  const packages = bundledPackages(dir);
  writeFileSync(path.join(dir, NOTICES_FILE), noticesText(packages));
  writeFileSync(path.join(dir, SBOM_FILE), `${JSON.stringify(sbom(packages, product), null, 2)}\n`);
  return packages;
}
