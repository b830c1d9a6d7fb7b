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
  repository: z.union([z.string(), z.looseObject({ url: z.string().optional() })]).optional(),
});

/**
 * Monorepos some of whose published packages carry no licence file of their own: such a package
 * takes the licence file of a sibling from the same repository (the aws-sdk-js-v3 packages the
 * log archive's S3 client pulls in, e.g. @aws-sdk/nested-clients, are Apache-2.0 as the
 * repository is, and ship no LICENSE).
 */
const MONOREPO_LICENSE_FROM: Record<string, string> = {
  "https://github.com/aws/aws-sdk-js-v3.git": "@aws-sdk/client-s3",
};

/** The sibling folder whose licence file a package of a listed monorepo takes, if any. */
export function monorepoLicenseDir(
  packageDir: string,
  manifest: z.infer<typeof PackageJson>,
): string | undefined {
  const url = typeof manifest.repository === "string" ? manifest.repository : manifest.repository?.url;
  const sibling = url === undefined ? undefined : MONOREPO_LICENSE_FROM[url];
  if (sibling === undefined) return undefined;
  const parts = packageDir.split(path.sep);
  const at = parts.lastIndexOf("node_modules");
  return path.join(parts.slice(0, at + 1).join(path.sep), ...sibling.split("/"));
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
    const licenseFileIn = (folder: string) =>
      readdirSync(folder)
        .filter((file) => /^(licen[cs]e|copying)(\b|[-_.])/i.test(file))
        .sort()[0];
    let licenseDir = packageDir;
    let licenseFile = licenseFileIn(packageDir);
    const sibling = licenseFile === undefined ? monorepoLicenseDir(packageDir, manifest) : undefined;
    if (sibling !== undefined && existsSync(sibling)) {
      licenseDir = sibling;
      licenseFile = licenseFileIn(sibling);
    }
    if (licenseFile === undefined) {
      problems.push(`${name}@${manifest.version}: no LICENSE file in ${packageDir}`);
      continue;
    }
    const noticeFile = readdirSync(packageDir).find((file) => /^notice(\.(txt|md))?$/i.test(file));
    packages.push({
      name,
      version: manifest.version,
      license: manifest.license,
      dir: packageDir,
      licenseFile,
      licenseText: readText(path.join(licenseDir, licenseFile)),
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
