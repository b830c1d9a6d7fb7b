// SeaweedFS's S3 server (`weed server -s3`, built by tools/build-seaweedfs.sh and linked into the
// control-plane set's folder) on loopback: the log archive's store in the tests and in
// `npm run cluster:up -- --with-object-store`. One identity with the archive's keys; a request
// signed with any other key, or not signed, is refused (403), as on a real store. The bucket is
// made at start. `stop()` and `start()` again (same folder, same ports) play a store that goes away
// mid-run and comes back.
import { randomBytes } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { CreateBucketCommand, S3Client } from "@aws-sdk/client-s3";
import { ArchiveStore } from "../../src/controller/log-archive/archive-store.js";
import {
  freeFixedPort,
  logTail,
  type RecordedProcess,
  type StartedProcess,
  startProcess,
  stopProcess,
  waitFor,
} from "./processes.js";

export const OBJECT_STORE_REGION = "us-east-1";

export interface ObjectStoreOptions {
  /** tools/build.sh's control-plane folder (it holds `weed`). */
  binDir: string;
  /** Data, config and log go under <stateDir>/object-store. */
  stateDir: string;
  bucket?: string;
  daemon?: boolean;
  log?: (message: string) => void;
  /** Called with each process started, e.g. to record it in the cluster's state for cluster:down. */
  record?: (process: RecordedProcess) => Promise<void>;
}

export interface ObjectStore {
  /** http://127.0.0.1:PORT (path-style addressing). */
  endpoint: string;
  bucket: string;
  region: string;
  accessKeyId: string;
  secretAccessKey: string;
  logFile: string;
  /** The archive's own client against this store, with its keys. */
  client(prefix?: string): ArchiveStore;
  /** The process now serving (changes after stop and start). */
  process(): StartedProcess | undefined;
  /** Stops the server (SIGTERM, then SIGKILL); the data stays. */
  stop(): Promise<void>;
  /** Starts it again on the same ports and data. */
  start(): Promise<void>;
}

/** The ports `weed server` opens: each given, so that none lands on a default someone else holds. */
interface Ports {
  master: number;
  masterGrpc: number;
  volume: number;
  volumeGrpc: number;
  filer: number;
  filerGrpc: number;
  s3: number;
  s3Grpc: number;
}

async function choosePorts(): Promise<Ports> {
  const ports: number[] = [];
  while (ports.length < 8) {
    const port = await freeFixedPort();
    if (!ports.includes(port)) ports.push(port);
  }
  const [master, masterGrpc, volume, volumeGrpc, filer, filerGrpc, s3, s3Grpc] = ports as [
    number,
    number,
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  return { master, masterGrpc, volume, volumeGrpc, filer, filerGrpc, s3, s3Grpc };
}

export async function startObjectStore(options: ObjectStoreOptions): Promise<ObjectStore> {
  const log = options.log ?? (() => {});
  const dir = path.join(options.stateDir, "object-store");
  const dataDir = path.join(dir, "data");
  mkdirSync(dataDir, { recursive: true });
  mkdirSync(path.join(options.stateDir, "logs"), { recursive: true });
  const logFile = path.join(options.stateDir, "logs", "object-store.log");
  const bucket = options.bucket ?? "playbook-logs";
  const accessKeyId = `AK${randomBytes(8).toString("hex").toUpperCase()}`;
  const secretAccessKey = randomBytes(24).toString("base64url");
  const configFile = path.join(dir, "s3.json");
  writeFileSync(
    configFile,
    JSON.stringify({
      identities: [
        {
          name: "playbook-log-archive",
          credentials: [{ accessKey: accessKeyId, secretKey: secretAccessKey }],
          actions: ["Admin", "Read", "Write", "List", "Tagging"],
        },
      ],
    }),
    { mode: 0o600 },
  );
  let ports = await choosePorts();
  const weed = path.join(options.binDir, "weed");
  let endpoint = `http://127.0.0.1:${ports.s3}`;
  const argsOf = (ports: Ports) => [
    "server",
    `-dir=${dataDir}`,
    "-ip=127.0.0.1",
    "-ip.bind=127.0.0.1",
    `-master.port=${ports.master}`,
    `-master.port.grpc=${ports.masterGrpc}`,
    // Small volumes: the default 30 GB each is preallocated per bucket's collection.
    "-master.volumeSizeLimitMB=256",
    `-volume.port=${ports.volume}`,
    `-volume.port.grpc=${ports.volumeGrpc}`,
    "-volume.max=0",
    "-filer",
    `-filer.port=${ports.filer}`,
    `-filer.port.grpc=${ports.filerGrpc}`,
    "-s3",
    `-s3.port=${ports.s3}`,
    `-s3.port.grpc=${ports.s3Grpc}`,
    // The S3 server's side services, off: each would open a fixed default port.
    "-s3.port.iceberg=0",
    "-s3.port.lance=0",
    `-s3.config=${configFile}`,
    "-metricsPort=0",
  ];
  const credentials = { accessKeyId, secretAccessKey };
  const client = (prefix = "") =>
    new ArchiveStore({
      endpoint,
      bucket,
      region: OBJECT_STORE_REGION,
      prefix,
      forcePathStyle: true,
      credentials,
      callTimeoutMs: 5000,
    });

  let current: StartedProcess | undefined;
  // A weed started again on the ports of one just stopped can exit at once (a port not yet
  // free, under load): it is started again, a few times, before the start fails. The first start
  // takes new ports each time: one chosen free may have been taken since by another test's
  // listener (nothing has the store's endpoint yet).
  const start = async (first = false) => {
    for (let tries = 1; ; tries += 1) {
      try {
        await startOnce();
        return;
      } catch (error) {
        if (tries >= 3 || !(error instanceof Error) || !error.message.includes("weed exited")) throw error;
        log(`SeaweedFS exited as it started (try ${tries}); starting it again`);
        if (first) {
          ports = await choosePorts();
          endpoint = `http://127.0.0.1:${ports.s3}`;
        }
        await new Promise((resolve) => setTimeout(resolve, 2000));
      }
    }
  };
  const startOnce = async () => {
    current = startProcess("object-store", weed, argsOf(ports), {
      logFile,
      daemon: options.daemon ?? false,
      // Not in any cluster's state.json: a test run killed before its teardown leaves none behind.
      diesWithParent: true,
    });
    const started = current;
    // Its exit as Node saw it, with the code or signal: /proc's view of a process that is just
    // exec'ing (setpriv to weed) is no proof it has gone.
    let exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
    void started.exited.then((how) => {
      exit = how;
    });
    await options.record?.(started);
    const s3 = new S3Client({ endpoint, region: OBJECT_STORE_REGION, forcePathStyle: true, credentials });
    try {
      // Ready when the bucket can be made (or is there) and written.
      await waitFor(
        `SeaweedFS's S3 server at ${endpoint} to make the bucket ${bucket}`,
        async () => {
          try {
            await s3.send(new CreateBucketCommand({ Bucket: bucket }));
          } catch (error) {
            const name = (error as { name?: string }).name;
            if (name !== "BucketAlreadyOwnedByYou" && name !== "BucketAlreadyExists") throw error;
          }
          // Writes need the volume server registered with the master: a put, not a list.
          const probe = client();
          try {
            await probe.putObject(".ready", Buffer.from("ready\n"), "text/plain");
            await probe.deletePrefix(".ready");
          } finally {
            probe.destroy();
          }
          return true;
        },
        {
          timeoutMs: 60_000,
          intervalMs: 250,
          abortIf: () =>
            exit === undefined
              ? undefined
              : `weed exited (${exit.signal ? `signal ${exit.signal}` : `code ${exit.code}`}):\n${logTail(logFile)}`,
        },
      );
    } finally {
      s3.destroy();
    }
    log(`SeaweedFS's S3 server at ${endpoint}, bucket ${bucket} (log ${logFile})`);
  };
  await start(true);

  return {
    endpoint,
    bucket,
    region: OBJECT_STORE_REGION,
    accessKeyId,
    secretAccessKey,
    logFile,
    client,
    process: () => current,
    async stop() {
      if (current) await stopProcess(current);
      current = undefined;
    },
    start: () => start(),
  };
}
