// image/testing/tar_builder: layers for tests, written with libarchive's writer (pax format),
// plain or compressed, and raw ustar headers for what no honest writer makes. Test-only.
//
//   std::string layer = MakeTar({File("etc/hosts", "127.0.0.1 localhost\n"), Dir("tmp", 01777),
//                                Symlink("bin", "usr/bin")}, Compression::kGzip);
//   std::string crafted = RawHeader("../x", '0', 3) + Block("abc") + std::string(1024, '\0');
//
// Thread-safety: pure functions.
#ifndef VAULT_IMAGE_TESTING_TAR_BUILDER_H_
#define VAULT_IMAGE_TESTING_TAR_BUILDER_H_

#include <archive.h>
#include <archive_entry.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "image/layer_unpack.h"

namespace vault::image::testing {

struct TarEntry {
  std::string path;
  mode_t type = AE_IFREG;
  std::string content;
  mode_t mode = 0644;
  std::string symlink;   // AE_IFLNK
  std::string hardlink;  // a hard link to this path
  std::vector<std::pair<std::string, std::string>> xattrs;
};

inline TarEntry File(std::string path, std::string content, mode_t mode = 0644) {
  return TarEntry{std::move(path), AE_IFREG, std::move(content), mode, "", "", {}};
}
inline TarEntry Dir(std::string path, mode_t mode = 0755) {
  return TarEntry{std::move(path), AE_IFDIR, "", mode, "", "", {}};
}
inline TarEntry Symlink(std::string path, std::string target) {
  return TarEntry{std::move(path), AE_IFLNK, "", 0777, std::move(target), "", {}};
}
inline TarEntry Hardlink(std::string path, std::string target) {
  return TarEntry{std::move(path), AE_IFREG, "", 0644, "", std::move(target), {}};
}
inline TarEntry Special(std::string path, mode_t type) {
  return TarEntry{std::move(path), type, "", 0666, "", "", {}};
}

// libarchive's write callback: appends to the std::string it is given.
inline la_ssize_t AppendTo(archive*, void* data, const void* buf, size_t n) {
  static_cast<std::string*>(data)->append(static_cast<const char*>(buf), n);
  return static_cast<la_ssize_t>(n);
}

inline std::string MakeTar(const std::vector<TarEntry>& entries,
                           Compression compression = Compression::kNone) {
  archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  if (compression == Compression::kGzip) archive_write_add_filter_gzip(a);
  if (compression == Compression::kZstd) archive_write_add_filter_zstd(a);
  archive_write_set_bytes_in_last_block(a, 1);
  std::string out;
  if (archive_write_open(a, &out, nullptr, AppendTo, nullptr) != ARCHIVE_OK) abort();
  for (const TarEntry& t : entries) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, t.path.c_str());
    archive_entry_set_filetype(e, t.type);
    archive_entry_set_perm(e, t.mode);
    archive_entry_set_uid(e, 0);
    archive_entry_set_gid(e, 0);
    if (!t.symlink.empty()) archive_entry_set_symlink(e, t.symlink.c_str());
    if (!t.hardlink.empty()) archive_entry_set_hardlink(e, t.hardlink.c_str());
    for (const auto& [k, v] : t.xattrs) {
      archive_entry_xattr_add_entry(e, k.c_str(), v.data(), v.size());
    }
    archive_entry_set_size(e, t.type == AE_IFREG && t.hardlink.empty()
                                  ? static_cast<la_int64_t>(t.content.size())
                                  : 0);
    if (archive_write_header(a, e) != ARCHIVE_OK) {
      std::fprintf(stderr, "tar_builder: %s\n", archive_error_string(a));
      abort();
    }
    if (!t.content.empty()) archive_write_data(a, t.content.data(), t.content.size());
    archive_entry_free(e);
  }
  archive_write_close(a);
  archive_write_free(a);
  return out;
}

// `bytes` gzip-compressed (libarchive's raw format through its gzip filter).
inline std::string Gzip(const std::string& bytes) {
  archive* a = archive_write_new();
  archive_write_set_format_raw(a);
  archive_write_add_filter_gzip(a);
  archive_write_set_bytes_in_last_block(a, 1);
  std::string out;
  if (archive_write_open(a, &out, nullptr, AppendTo, nullptr) != ARCHIVE_OK) abort();
  archive_entry* e = archive_entry_new();
  archive_entry_set_filetype(e, AE_IFREG);
  archive_entry_set_pathname(e, "data");
  if (archive_write_header(a, e) != ARCHIVE_OK) abort();
  archive_write_data(a, bytes.data(), bytes.size());
  archive_entry_free(e);
  archive_write_close(a);
  archive_write_free(a);
  return out;
}

// One raw ustar header: any name, type flag, size and link name, with a valid checksum.
inline std::string RawHeader(const std::string& name, char type, unsigned long long size,
                             const std::string& link = "") {
  std::string h(512, '\0');
  h.replace(0, std::min<size_t>(name.size(), 100), name.substr(0, 100));
  h.replace(100, 7, "0000644");
  h.replace(108, 7, "0000000");
  h.replace(116, 7, "0000000");
  h.replace(124, 11, absl::StrFormat("%011llo", size & 077777777777ull));
  h.replace(136, 11, "00000000000");
  h[156] = type;
  h.replace(157, std::min<size_t>(link.size(), 100), link.substr(0, 100));
  h.replace(257, 6, std::string("ustar\0", 6));
  h.replace(263, 2, "00");
  h.replace(148, 8, "        ");
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  h.replace(148, 6, absl::StrFormat("%06o", sum));
  h[154] = '\0';
  h[155] = ' ';
  return h;
}

// `content` padded to whole 512-byte blocks.
inline std::string Block(const std::string& content) {
  std::string b = content;
  b.resize((content.size() + 511) / 512 * 512, '\0');
  return b;
}

inline std::string EndOfTar() { return std::string(1024, '\0'); }

}  // namespace vault::image::testing

#endif  // VAULT_IMAGE_TESTING_TAR_BUILDER_H_
