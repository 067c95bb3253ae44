// FileParts: a file read in parts, from several threads at once, and its
// errors named.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "lockstep/core/error.h"
#include "lockstep/core/file.h"

namespace lockstep {
namespace {

class FilePartsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("lockstep_file_parts_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  std::filesystem::path dir_;
};

TEST_F(FilePartsTest, PartsReadFromSeveralThreadsAreTheFilesBytes) {
  std::string bytes(1 << 20, '\0');
  for (std::size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<char>(i * 2654435761u >> 13);
  const FileParts file(write("f.bin", bytes));
  ASSERT_EQ(file.size(), bytes.size());
  std::vector<std::string> got(4);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < got.size(); ++t) {
    threads.emplace_back([&, t] {
      const std::size_t begin = bytes.size() * t / got.size() + t;  // ends that are not aligned
      const std::size_t end =
          t + 1 == got.size() ? bytes.size() : bytes.size() * (t + 1) / got.size() + t + 1;
      got[t].resize(end - begin);
      file.read(begin, got[t].size(), got[t].data());
      got[t] = got[t] == bytes.substr(begin, end - begin) ? "same" : "different";
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::string& g : got) EXPECT_EQ(g, "same");
}

TEST_F(FilePartsTest, PartsPastTheEndAndFilesThatAreNoneAreErrorsNamingThem) {
  const std::string path = write("short.bin", "0123456789");
  const FileParts file(path);
  std::string part(8, '\0');
  file.read(4, 6, part.data());
  EXPECT_EQ(part.substr(0, 6), "456789");
  try {
    file.read(6, 8, part.data());
    FAIL() << "8 bytes at offset 6 of a 10-byte file";
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find("short.bin: read 4 of the 8 bytes at offset 6"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(FileParts((dir_ / "none.bin").string()), IOError);
  try {
    FileParts{dir_.string()};
    FAIL() << "a directory";
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lockstep
