// The log archive's S3 store: the few calls the archive makes, over @aws-sdk/client-s3 (any S3
// API: AWS, MinIO, SeaweedFS, Ceph RGW, R2). Only the controller holds the credentials (the
// SDK's default chain: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY from the chart's
// credentialsSecret). Every call is bounded by a deadline of its own, so that a store that does
// not answer never holds a reconcile or a run; the caller decides what a failure means.

import type { Readable } from "node:stream";
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  DeleteObjectsCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListMultipartUploadsCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
  type S3ClientConfig,
  UploadPartCommand,
  UploadPartCopyCommand,
} from "@aws-sdk/client-s3";
import { getSignedUrl } from "@aws-sdk/s3-request-presigner";
import type { z } from "zod";

export interface ArchiveStoreSettings {
  /** e.g. https://s3.eu-west-1.amazonaws.com or http://127.0.0.1:8333; unset: AWS's own. */
  endpoint?: string | undefined;
  bucket: string;
  region: string;
  /** Key prefix of every object (e.g. "playbooks/"); "" for the bucket's root. */
  prefix: string;
  /** http://HOST/BUCKET/KEY rather than http://BUCKET.HOST/KEY (MinIO, SeaweedFS). */
  forcePathStyle: boolean;
  /** Explicit keys (tests); unset: the SDK's default chain (env, files). */
  credentials?: { accessKeyId: string; secretAccessKey: string } | undefined;
  /** Each call's deadline. */
  callTimeoutMs?: number | undefined;
  /** The store's endpoint as the run's pods reach it: the runner's upload URLs are signed for it. */
  podEndpoint?: string | undefined;
}

export interface StoredObject {
  body: Readable;
  bytes: number;
}

/** A piece of a composed object: an object the store copies, or bytes given. */
export type ComposeSource = { key: string } | { bytes: Buffer };

export interface UploadedPart {
  PartNumber: number;
  ETag: string;
}

const DEFAULT_CALL_TIMEOUT_MS = 15_000;

export class ArchiveStore {
  readonly bucket: string;
  readonly prefix: string;
  private readonly client: S3Client;
  private readonly config: S3ClientConfig;
  /** Signs the runner's uploads, for the endpoint the pods reach: made on first use. */
  private presigner: S3Client | undefined;
  private readonly podEndpoint: string | undefined;
  private readonly callTimeoutMs: number;

  constructor(settings: ArchiveStoreSettings) {
    this.bucket = settings.bucket;
    this.prefix = settings.prefix;
    this.callTimeoutMs = settings.callTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS;
    this.podEndpoint = settings.podEndpoint;
    this.config = {
      ...(settings.endpoint === undefined ? {} : { endpoint: settings.endpoint }),
      region: settings.region,
      forcePathStyle: settings.forcePathStyle,
      ...(settings.credentials === undefined ? {} : { credentials: settings.credentials }),
      // The archive retries on its own schedule (the next reconcile, the next part); one SDK
      // retry covers a dropped connection.
      maxAttempts: 2,
      requestHandler: { connectionTimeout: Math.min(5000, this.callTimeoutMs) },
    };
    this.client = new S3Client(this.config);
  }

  /**
   * A URL that lets whoever holds it PUT the object `key`, and nothing else, until it expires.
   * The signature covers the method, the bucket and the key: the same URL with another key is
   * refused. Signed without a payload checksum, which the holder could not know in advance.
   */
  async presignPut(key: string, expiresInSeconds: number): Promise<string> {
    this.presigner ??= new S3Client({
      ...this.config,
      ...(this.podEndpoint === undefined ? {} : { endpoint: this.podEndpoint }),
      requestChecksumCalculation: "WHEN_REQUIRED",
    });
    return getSignedUrl(this.presigner, new PutObjectCommand({ Bucket: this.bucket, Key: key }), {
      expiresIn: expiresInSeconds,
    });
  }

  /**
   * The object `key` made of `sources` in order: objects copied by the store itself, or bytes the
   * caller gives (a multipart upload of their parts). Every source but the last must hold 5 MiB
   * at least, as S3 requires of a part. The source objects stay.
   */
  async composeObject(key: string, sources: ComposeSource[], contentType: string): Promise<void> {
    if (sources.length === 0) throw new Error(`no sources to compose ${key} of`);
    const uploadId = await this.startUpload(key, contentType);
    try {
      const parts: UploadedPart[] = [];
      for (const [i, source] of sources.entries()) {
        if ("bytes" in source) {
          parts.push(await this.uploadPart(key, uploadId, i + 1, source.bytes));
          continue;
        }
        const out = await this.client.send(
          new UploadPartCopyCommand({
            Bucket: this.bucket,
            Key: key,
            UploadId: uploadId,
            PartNumber: i + 1,
            CopySource: `${this.bucket}/${source.key.split("/").map(encodeURIComponent).join("/")}`,
          }),
          { abortSignal: this.signal() },
        );
        const etag = out.CopyPartResult?.ETag;
        if (!etag) throw new Error(`the store returned no ETag copying ${source.key} into ${key}`);
        parts.push({ PartNumber: i + 1, ETag: etag });
      }
      await this.completeUpload(key, uploadId, parts);
    } catch (error) {
      await this.abortUpload(key, uploadId).catch(() => undefined);
      throw error;
    }
  }

  private signal(): AbortSignal {
    return AbortSignal.timeout(this.callTimeoutMs);
  }

  async putObject(key: string, body: Buffer | string, contentType: string): Promise<void> {
    await this.client.send(
      new PutObjectCommand({ Bucket: this.bucket, Key: key, Body: body, ContentType: contentType }),
      { abortSignal: this.signal() },
    );
  }

  async startUpload(key: string, contentType: string): Promise<string> {
    const out = await this.client.send(
      new CreateMultipartUploadCommand({ Bucket: this.bucket, Key: key, ContentType: contentType }),
      { abortSignal: this.signal() },
    );
    if (!out.UploadId) throw new Error(`the store returned no upload id for ${key}`);
    return out.UploadId;
  }

  async uploadPart(key: string, uploadId: string, partNumber: number, body: Buffer): Promise<UploadedPart> {
    const out = await this.client.send(
      new UploadPartCommand({
        Bucket: this.bucket,
        Key: key,
        UploadId: uploadId,
        PartNumber: partNumber,
        Body: body,
        ContentLength: body.length,
      }),
      { abortSignal: this.signal() },
    );
    if (!out.ETag) throw new Error(`the store returned no ETag for part ${partNumber} of ${key}`);
    return { PartNumber: partNumber, ETag: out.ETag };
  }

  async completeUpload(key: string, uploadId: string, parts: UploadedPart[]): Promise<void> {
    await this.client.send(
      new CompleteMultipartUploadCommand({
        Bucket: this.bucket,
        Key: key,
        UploadId: uploadId,
        MultipartUpload: { Parts: parts },
      }),
      { abortSignal: this.signal() },
    );
  }

  async abortUpload(key: string, uploadId: string): Promise<void> {
    await this.client.send(
      new AbortMultipartUploadCommand({ Bucket: this.bucket, Key: key, UploadId: uploadId }),
      {
        abortSignal: this.signal(),
      },
    );
  }

  /** The object's body as a stream (the caller reads it to the end or destroys it); undefined when absent. */
  async getObject(key: string, signal?: AbortSignal): Promise<StoredObject | undefined> {
    try {
      const out = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: key }), {
        abortSignal: signal ?? this.signal(),
      });
      return { body: out.Body as Readable, bytes: out.ContentLength ?? 0 };
    } catch (error) {
      if (isNotFound(error)) return undefined;
      throw error;
    }
  }

  /** A small object (a record, a report) whole, as UTF-8 text; undefined when absent. */
  async readText(key: string): Promise<string | undefined> {
    return (await this.readBytes(key))?.toString("utf8");
  }

  /**
   * A small JSON object read with its schema: undefined when absent, or when it is not JSON or not
   * of the schema (whatever wrote it may have been cut short); a store that fails throws.
   */
  async readJson<T>(key: string, schema: z.ZodType<T>): Promise<T | undefined> {
    const text = await this.readText(key);
    if (text === undefined) return undefined;
    try {
      const read = schema.safeParse(JSON.parse(text));
      return read.success ? read.data : undefined;
    } catch {
      return undefined;
    }
  }

  /** An object whole, in memory (a segment at most); undefined when absent. */
  async readBytes(key: string): Promise<Buffer | undefined> {
    const object = await this.getObject(key);
    if (!object) return undefined;
    const chunks: Buffer[] = [];
    for await (const chunk of object.body) chunks.push(Buffer.from(chunk as Uint8Array));
    return Buffer.concat(chunks);
  }

  async headObject(key: string): Promise<{ bytes: number } | undefined> {
    try {
      const out = await this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: key }), {
        abortSignal: this.signal(),
      });
      return { bytes: out.ContentLength ?? 0 };
    } catch (error) {
      if (isNotFound(error)) return undefined;
      throw error;
    }
  }

  /** Deletes one object; one already gone is no error. */
  async deleteObject(key: string): Promise<void> {
    await this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: key }), {
      abortSignal: this.signal(),
    });
  }

  /** Every key under a prefix (objects only, not uploads in progress). */
  async listKeys(prefix: string): Promise<string[]> {
    return [...(await this.listSizes(prefix)).keys()];
  }

  /** Every object under a prefix and its size in bytes. */
  async listSizes(prefix: string): Promise<Map<string, number>> {
    const sizes = new Map<string, number>();
    let token: string | undefined;
    do {
      const out = await this.client.send(
        new ListObjectsV2Command({ Bucket: this.bucket, Prefix: prefix, ContinuationToken: token }),
        { abortSignal: this.signal() },
      );
      for (const item of out.Contents ?? []) if (item.Key) sizes.set(item.Key, item.Size ?? 0);
      token = out.IsTruncated ? out.NextContinuationToken : undefined;
    } while (token);
    return sizes;
  }

  /** The multipart uploads begun and not ended under a prefix. */
  async listUploads(prefix: string): Promise<{ key: string; uploadId: string }[]> {
    const out = await this.client.send(
      new ListMultipartUploadsCommand({ Bucket: this.bucket, Prefix: prefix }),
      {
        abortSignal: this.signal(),
      },
    );
    return (out.Uploads ?? []).flatMap((u) =>
      u.Key && u.UploadId ? [{ key: u.Key, uploadId: u.UploadId }] : [],
    );
  }

  /**
   * Deletes every object and aborts every upload under a prefix (`uploads: false`: objects only,
   * where no upload can be); returns how many objects went. Safe to repeat: what is already gone
   * is no error.
   */
  async deletePrefix(prefix: string, options: { uploads?: boolean } = {}): Promise<number> {
    if (options.uploads !== false)
      for (const upload of await this.listUploads(prefix))
        await this.abortUpload(upload.key, upload.uploadId);
    const keys = await this.listKeys(prefix);
    for (let i = 0; i < keys.length; i += 1000) {
      const batch = keys.slice(i, i + 1000);
      const out = await this.client.send(
        new DeleteObjectsCommand({
          Bucket: this.bucket,
          Delete: { Objects: batch.map((Key) => ({ Key })), Quiet: true },
        }),
        { abortSignal: this.signal() },
      );
      const failed = out.Errors ?? [];
      if (failed.length > 0)
        throw new Error(
          `the store refused to delete ${failed.length} object(s) under ${prefix}, first ${failed[0]?.Key}: ${failed[0]?.Code} ${failed[0]?.Message}`,
        );
    }
    return keys.length;
  }

  destroy(): void {
    this.client.destroy();
    this.presigner?.destroy();
  }
}

function isNotFound(error: unknown): boolean {
  const e = error as { name?: string; $metadata?: { httpStatusCode?: number } };
  return e?.name === "NoSuchKey" || e?.name === "NotFound" || e?.$metadata?.httpStatusCode === 404;
}

/** The store the controller's settings name, or undefined when the archive is off (no bucket). */
export function archiveStoreFromConfig(config: {
  logArchiveBucket?: string | undefined;
  logArchiveEndpoint?: string | undefined;
  logArchiveRegion: string;
  logArchivePrefix: string;
  logArchiveForcePathStyle: boolean;
  logArchivePodEndpoint?: string | undefined;
}): ArchiveStore | undefined {
  if (config.logArchiveBucket === undefined) return undefined;
  return new ArchiveStore({
    endpoint: config.logArchiveEndpoint,
    podEndpoint: config.logArchivePodEndpoint,
    bucket: config.logArchiveBucket,
    region: config.logArchiveRegion,
    prefix: config.logArchivePrefix,
    forcePathStyle: config.logArchiveForcePathStyle,
  });
}
