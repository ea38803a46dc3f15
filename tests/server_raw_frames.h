// A raw Lookup over a client's own Connection, for tests that reach into the
// shared arena (flip a byte of a slot, release a lease by hand): the frame a
// ServerClient sends for one key, and the reply's lease and that key's slot,
// generation and length (src/server_client/wire.h, Op::kLookup).
#ifndef KVTIER_TESTS_SERVER_RAW_FRAMES_H_
#define KVTIER_TESTS_SERVER_RAW_FRAMES_H_

#include <cstdint>
#include <span>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/status.h"
#include "server_client/connection.h"
#include "server_client/wire.h"

namespace kvtier::server_test {

struct RawLookup {
  uint64_t lease = 0;
  uint32_t slot = server::kNoSlot;
  uint64_t generation = 0;
  uint64_t length = 0;
};

// Looks `key` up on `conn`, whose mutex the caller holds.
inline Result<RawLookup> LookUpRaw(server::Connection* conn, const BlockKey& key) {
  server::FrameWriter w(server::Op::kLookup);
  server::WriteKeys(&w, std::span<const BlockKey>(&key, 1));
  Result<std::vector<uint8_t>> body = conn->Call(&w);
  if (!body.ok()) return body.status();
  server::FrameReader r(*body);
  if (Status head = server::ReadReplyHead(&r, server::Op::kLookup); !head.ok()) return head;
  RawLookup out;
  out.lease = r.U64();
  if (const uint32_t n = r.U32(); n != 1) {
    return Status::Corruption("a Lookup of one key answered " + std::to_string(n) + " keys");
  }
  out.slot = r.U32();
  out.generation = r.U64();
  out.length = r.U64();
  return out;
}

}  // namespace kvtier::server_test

#endif  // KVTIER_TESTS_SERVER_RAW_FRAMES_H_
