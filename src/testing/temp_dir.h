// TempDir: a fresh folder under the system temp folder for a test, removed
// with its content when the object goes away. Tests use the real file
// system through it (POSIX Env, SQLite, child processes).
#ifndef KVTIER_TESTING_TEMP_DIR_H_
#define KVTIER_TESTING_TEMP_DIR_H_

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace kvtier::testing {

class TempDir {
 public:
  // The folder is named "<prefix>_XXXXXX"; path() is empty if mkdtemp fails.
  explicit TempDir(const std::string& prefix = "kvtier") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    if (::mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // path() + "/" + name.
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace kvtier::testing

#endif  // KVTIER_TESTING_TEMP_DIR_H_
