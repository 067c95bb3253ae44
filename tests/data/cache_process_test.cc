// cache(filename) across real processes: two writers at once, and a writer
// killed with SIGKILL half way.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

extern char** environ;

namespace {

namespace fs = std::filesystem;

pid_t spawn_writer(const std::string& path, int n, int delay_us) {
  const std::string n_s = std::to_string(n), d_s = std::to_string(delay_us);
  const char* argv[] = {CACHE_WRITER_PATH, path.c_str(), n_s.c_str(), d_s.c_str(), nullptr};
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, CACHE_WRITER_PATH, nullptr, nullptr,
                             const_cast<char* const*>(argv), environ);
  EXPECT_EQ(rc, 0) << "posix_spawn " << CACHE_WRITER_PATH;
  return pid;
}

int wait_exit(pid_t pid) {
  int status = 0;
  EXPECT_EQ(::waitpid(pid, &status, 0), pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::vector<fs::path> temporaries(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().find(".tmp") != std::string::npos) out.push_back(e.path());
  }
  return out;
}

class CacheProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("lockstep_cacheproc_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(CacheProcessTest, TwoWritersAtOnceBothSucceedAndTheFileIsWhole) {
  const std::string path = (dir_ / "shared.cache").string();
  const pid_t a = spawn_writer(path, 300, 300);
  const pid_t b = spawn_writer(path, 300, 300);
  EXPECT_EQ(wait_exit(a), 0);
  EXPECT_EQ(wait_exit(b), 0);
  EXPECT_TRUE(fs::exists(path));
  EXPECT_TRUE(temporaries(dir_).empty());
  // A third process reads the file (it checks every value).
  EXPECT_EQ(wait_exit(spawn_writer(path, 300, 0)), 0);
}

TEST_F(CacheProcessTest, KilledWriterLeavesNoFileThatIsTrusted) {
  const std::string path = (dir_ / "killed.cache").string();
  const pid_t w = spawn_writer(path, 4000, 1000);  // ~4 s of writing
  // Wait until the writer has streamed part of the temporary file.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  bool started = false;
  while (!started && std::chrono::steady_clock::now() < deadline) {
    for (const auto& t : temporaries(dir_)) started = started || fs::file_size(t) > (1u << 20);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(started) << "the writer never wrote its temporary file";
  ::kill(w, SIGKILL);
  EXPECT_EQ(wait_exit(w), 128 + SIGKILL);
  EXPECT_FALSE(fs::exists(path)) << "a killed writer must not publish the cache";
  EXPECT_EQ(temporaries(dir_).size(), 1u);
  // The next run rebuilds a complete file and removes the dead writer's
  // temporary; the run after it reads that file.
  EXPECT_EQ(wait_exit(spawn_writer(path, 4000, 0)), 0);
  EXPECT_TRUE(fs::exists(path));
  EXPECT_TRUE(temporaries(dir_).empty());
  EXPECT_EQ(wait_exit(spawn_writer(path, 4000, 0)), 0);
}

}  // namespace
