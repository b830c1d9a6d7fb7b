;; The output path's line prefixing (output.ts LinePrefixer) for large chunks: the chunk is
;; copied into this module's memory once, searched for line ends 16 bytes at a time (SIMD), and
;; each line is copied behind its prefix 16 bytes at a time, with no call out of the module per
;; line (a Buffer#indexOf and a copyWithin per line cost more than the bytes at 100-byte lines).
;; `npm run kernel:generate` assembles it into line-kernel-module.ts (checked by a unit test).
(module
  (memory (export "memory") 1)

  ;; Copies n bytes from src to dst 16 at a time. It may write up to 15 bytes past dst + n and
  ;; read up to 15 past src + n: the caller leaves that slack, and whatever is written past the
  ;; end is written over by what comes next, in order.
  (func $copy (param $dst i32) (param $src i32) (param $n i32)
    (local $end i32)
    (local.set $end (i32.add (local.get $dst) (local.get $n)))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $dst) (local.get $end)))
        (v128.store (local.get $dst) (v128.load (local.get $src)))
        (local.set $dst (i32.add (local.get $dst) (i32.const 16)))
        (local.set $src (i32.add (local.get $src) (i32.const 16)))
        (br $next))))

  ;; The len bytes at in, each line behind the size bytes at pfx, written from out; a first line
  ;; gets its prefix only when starts is 1 (else it goes on with the line the last chunk left
  ;; open). Returns the bytes written.
  (func (export "prefix")
    (param $in i32) (param $len i32) (param $out i32) (param $pfx i32) (param $size i32)
    (param $starts i32) (result i32)
    (local $w i32) (local $from i32) (local $i i32) (local $blocks i32) (local $stop i32)
    (local $mask i32) (local $lineEnd i32) (local $newline v128)
    (local.set $newline (i8x16.splat (i32.const 10)))
    (local.set $w (local.get $out))
    (local.set $from (local.get $in))
    (local.set $i (local.get $in))
    (local.set $stop (i32.add (local.get $in) (local.get $len)))
    (local.set $blocks (i32.add (local.get $in) (i32.and (local.get $len) (i32.const -16))))
    ;; Whole blocks of 16 bytes.
    (block $blocksDone
      (loop $block
        (br_if $blocksDone (i32.ge_u (local.get $i) (local.get $blocks)))
        (local.set $mask
          (i8x16.bitmask (i8x16.eq (v128.load (local.get $i)) (local.get $newline))))
        (block $linesDone
          (loop $line
            (br_if $linesDone (i32.eqz (local.get $mask)))
            (local.set $lineEnd
              (i32.add (i32.add (local.get $i) (i32.ctz (local.get $mask))) (i32.const 1)))
            (if (local.get $starts)
              (then
                (call $copy (local.get $w) (local.get $pfx) (local.get $size))
                (local.set $w (i32.add (local.get $w) (local.get $size)))))
            (call $copy (local.get $w) (local.get $from)
              (i32.sub (local.get $lineEnd) (local.get $from)))
            (local.set $w
              (i32.add (local.get $w) (i32.sub (local.get $lineEnd) (local.get $from))))
            (local.set $from (local.get $lineEnd))
            (local.set $starts (i32.const 1))
            (local.set $mask
              (i32.and (local.get $mask) (i32.sub (local.get $mask) (i32.const 1))))
            (br $line)))
        (local.set $i (i32.add (local.get $i) (i32.const 16)))
        (br $block)))
    ;; The last bytes, fewer than 16, one at a time.
    (block $tailDone
      (loop $tail
        (br_if $tailDone (i32.ge_u (local.get $i) (local.get $stop)))
        (if (i32.eq (i32.load8_u (local.get $i)) (i32.const 10))
          (then
            (local.set $lineEnd (i32.add (local.get $i) (i32.const 1)))
            (if (local.get $starts)
              (then
                (call $copy (local.get $w) (local.get $pfx) (local.get $size))
                (local.set $w (i32.add (local.get $w) (local.get $size)))))
            (call $copy (local.get $w) (local.get $from)
              (i32.sub (local.get $lineEnd) (local.get $from)))
            (local.set $w
              (i32.add (local.get $w) (i32.sub (local.get $lineEnd) (local.get $from))))
            (local.set $from (local.get $lineEnd))
            (local.set $starts (i32.const 1))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $tail)))
    ;; A line left open at the chunk's end: its prefix if it starts here, and its bytes so far.
    (if (i32.lt_u (local.get $from) (local.get $stop))
      (then
        (if (local.get $starts)
          (then
            (call $copy (local.get $w) (local.get $pfx) (local.get $size))
            (local.set $w (i32.add (local.get $w) (local.get $size)))))
        (call $copy (local.get $w) (local.get $from)
          (i32.sub (local.get $stop) (local.get $from)))
        (local.set $w
          (i32.add (local.get $w) (i32.sub (local.get $stop) (local.get $from))))))
    (i32.sub (local.get $w) (local.get $out))))
