// What every API call carries from the kubeconfig: the TLS material, read again only when its
// file changed (not on every call), and the credentials — a token file read again when it
// changes, an exec plugin's credential kept until it expires — which a 401 drops, so the call
// after it fetches them afresh, as client-go's exec authenticator and token file source do.
import { spawn } from "node:child_process";
import fs from "node:fs";
import type { KubeConfig } from "@kubernetes/client-node";
import { z } from "zod";

/** The TLS settings of the connection to the API server; a new object only when one changed. */
export interface TlsMaterial {
  ca?: Buffer | undefined;
  cert?: Buffer | string | undefined;
  key?: Buffer | string | undefined;
  rejectUnauthorized?: boolean | undefined;
  servername?: string | undefined;
}

export interface Credentials {
  tls: TlsMaterial;
  /** Authorization and Impersonate-User, as the kubeconfig asks. */
  headers: Record<string, string>;
  /** user:password of basic authentication. */
  auth?: string | undefined;
}

/** A file read again only when it changed (another inode, size or time), or when told to forget it. */
class ChangingFile {
  private stamp = "";
  private content: Buffer | undefined;
  readonly path: string;

  constructor(path: string) {
    this.path = path;
  }

  read(): Buffer {
    // stat follows the symlinks a mounted Secret or projected token swaps on an update.
    const stat = fs.statSync(this.path);
    const stamp = `${stat.dev}:${stat.ino}:${stat.size}:${stat.mtimeMs}:${stat.ctimeMs}`;
    if (this.content === undefined || stamp !== this.stamp) {
      this.content = fs.readFileSync(this.path);
      this.stamp = stamp;
    }
    return this.content;
  }

  forget(): void {
    this.content = undefined;
  }
}

const ExecConfigSchema = z.looseObject({
  command: z.string().min(1),
  args: z.array(z.string()).nullish(),
  env: z.array(z.object({ name: z.string(), value: z.string() })).nullish(),
  apiVersion: z.string().optional(),
});

const ExecCredentialSchema = z.looseObject({
  kind: z.literal("ExecCredential"),
  status: z.looseObject({
    token: z.string().optional(),
    clientCertificateData: z.string().optional(),
    clientKeyData: z.string().optional(),
    expirationTimestamp: z.string().optional(),
  }),
});

type ExecCredential = z.infer<typeof ExecCredentialSchema>["status"];

const TokenFileProviderSchema = z.looseObject({ config: z.looseObject({ tokenFile: z.string().min(1) }) });

/**
 * The credentials of the kubeconfig's current user. KubeConfig gives the settings; reading the
 * files and running the exec plugin happen here, so that they can be refreshed.
 */
export class ApiCredentials {
  private readonly kubeConfig: KubeConfig;
  private readonly files = new Map<string, ChangingFile>();
  private exec: Promise<ExecCredential> | undefined;
  private execExpiresAt = Number.POSITIVE_INFINITY;
  private tls: TlsMaterial | undefined;

  constructor(kubeConfig: KubeConfig) {
    this.kubeConfig = kubeConfig;
  }

  /** The credentials for the next call; an exec plugin that has to run ends with the signal. */
  async current(signal?: AbortSignal): Promise<Credentials> {
    const cluster = this.kubeConfig.getCurrentCluster();
    const user = this.kubeConfig.getCurrentUser();
    const headers: Record<string, string> = {};
    let cert: Buffer | string | undefined = this.fileOrData(user?.certFile, user?.certData);
    let key: Buffer | string | undefined = this.fileOrData(user?.keyFile, user?.keyData);
    const execConfig = user?.exec ?? user?.authProvider?.config?.exec;
    const tokenFile = TokenFileProviderSchema.safeParse(user?.authProvider);
    if (user?.token) {
      headers.Authorization = `Bearer ${user.token}`;
    } else if (tokenFile.success) {
      const token = this.file(tokenFile.data.config.tokenFile).read().toString("utf8").trim();
      if (token) headers.Authorization = `Bearer ${token}`;
    } else if (execConfig) {
      const credential = await abortable(this.execCredential(execConfig), signal);
      if (credential.token) headers.Authorization = `Bearer ${credential.token}`;
      if (credential.clientCertificateData) cert = credential.clientCertificateData;
      if (credential.clientKeyData) key = credential.clientKeyData;
    } else if (user?.authProvider) {
      // OIDC and the cloud providers: client-node's authenticators, which refresh themselves.
      const options: { headers?: Record<string, unknown> } = {};
      await this.kubeConfig.applyToHTTPSOptions(options);
      const authorization = options.headers?.Authorization;
      if (typeof authorization === "string") headers.Authorization = authorization;
    }
    if (user?.impersonateUser) headers["Impersonate-User"] = user.impersonateUser;
    const tls: TlsMaterial = {
      ca: this.fileOrData(cluster?.caFile, cluster?.caData),
      cert,
      key,
      rejectUnauthorized: cluster?.skipTLSVerify ? false : undefined,
      servername: cluster?.tlsServerName || undefined,
    };
    if (!this.tls || !sameTls(this.tls, tls)) this.tls = tls;
    return {
      tls: this.tls,
      headers,
      auth: user?.username ? `${user.username}:${user.password ?? ""}` : undefined,
    };
  }

  /**
   * The API server answered 401: forget the token file and the exec plugin's credential, so the
   * next call reads or runs them again (a rotated token, a revoked credential).
   */
  refresh(): void {
    for (const file of this.files.values()) file.forget();
    this.exec = undefined;
  }

  private file(path: string): ChangingFile {
    let file = this.files.get(path);
    if (!file) {
      file = new ChangingFile(path);
      this.files.set(path, file);
    }
    return file;
  }

  private fileOrData(path: string | null | undefined, data: string | null | undefined): Buffer | undefined {
    if (path) return this.file(path).read();
    if (data) return decodedData(data);
    return undefined;
  }

  private execCredential(config: unknown): Promise<ExecCredential> {
    if (this.exec && Date.now() < this.execExpiresAt) return this.exec;
    const parsed = ExecConfigSchema.safeParse(config);
    if (!parsed.success) {
      return Promise.reject(
        new Error(
          `users[].user.exec of the kubeconfig: ${parsed.error.issues[0]?.path.join(".") || "exec"} ${parsed.error.issues[0]?.message ?? "is invalid"}`,
        ),
      );
    }
    this.execExpiresAt = Number.POSITIVE_INFINITY;
    const pending = runExecPlugin(parsed.data).then((credential) => {
      if (credential.expirationTimestamp) this.execExpiresAt = Date.parse(credential.expirationTimestamp);
      return credential;
    });
    // A failed run is not kept: the next call runs the plugin again.
    pending.catch(() => {
      if (this.exec === pending) this.exec = undefined;
    });
    this.exec = pending;
    return pending;
  }
}

/** A kubeconfig's base64 data decoded once, however often it is asked for. */
const decoded = new Map<string, Buffer>();
function decodedData(data: string): Buffer {
  let buffer = decoded.get(data);
  if (!buffer) {
    buffer = Buffer.from(data, "base64");
    decoded.set(data, buffer);
  }
  return buffer;
}

function sameTls(a: TlsMaterial, b: TlsMaterial): boolean {
  return (
    a.ca === b.ca &&
    a.cert === b.cert &&
    a.key === b.key &&
    a.rejectUnauthorized === b.rejectUnauthorized &&
    a.servername === b.servername
  );
}

function abortable<T>(promise: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return promise;
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener("abort", onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(error);
      },
    );
  });
}

/** Runs a client-go exec credential plugin (non-interactive) and parses its ExecCredential. */
function runExecPlugin(config: z.infer<typeof ExecConfigSchema>): Promise<ExecCredential> {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const { name, value } of config.env ?? []) env[name] = value;
  env.KUBERNETES_EXEC_INFO = JSON.stringify({
    apiVersion: config.apiVersion ?? "client.authentication.k8s.io/v1",
    kind: "ExecCredential",
    spec: { interactive: false },
  });
  return new Promise((resolve, reject) => {
    const child = spawn(config.command, config.args ?? [], { env, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
      stdout += chunk;
    });
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
      stderr += chunk;
    });
    child.on("error", (error) =>
      reject(new Error(`exec credential plugin ${config.command}: ${error.message}`)),
    );
    child.on("close", (code, signal) => {
      if (code !== 0) {
        const ending = signal ? `was killed by ${signal}` : `exited ${code}`;
        reject(
          new Error(`exec credential plugin ${config.command} ${ending}: ${stderr.trim().slice(0, 300)}`),
        );
        return;
      }
      let raw: unknown;
      try {
        raw = JSON.parse(stdout);
      } catch {
        reject(new Error(`exec credential plugin ${config.command}: its output is not JSON`));
        return;
      }
      const parsed = ExecCredentialSchema.safeParse(raw);
      if (!parsed.success) {
        reject(new Error(`exec credential plugin ${config.command}: its output is not an ExecCredential`));
        return;
      }
      resolve(parsed.data.status);
    });
  });
}
