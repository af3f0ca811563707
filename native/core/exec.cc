// execvpe(file, argv, env) for `rdma-graph exec`: the Node process becomes the program (same PID,
// no node left resident beside it). Before the exec, what Node changed and a program would
// inherit is put back: every signal's disposition that Node set to "ignore" (SIGPIPE) returns to
// the default, the signal mask is emptied, and stdin/stdout/stderr lose the O_NONBLOCK and
// FD_CLOEXEC Node and libuv may have set on them (the program would start without its stdio). Returns only on failure,
// throwing the errno.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "common.h"

namespace rg {
namespace {

std::vector<std::string> Strings(Napi::Env env, const Napi::Value& v, const char* what) {
  if (!v.IsArray()) throw Napi::TypeError::New(env, std::string("execve: ") + what + " must be a list of strings");
  auto a = v.As<Napi::Array>();
  std::vector<std::string> out;
  for (uint32_t i = 0; i < a.Length(); i++) {
    Napi::Value s = a.Get(i);
    if (!s.IsString()) throw Napi::TypeError::New(env, std::string("execve: ") + what + " must be a list of strings");
    out.push_back(s.As<Napi::String>().Utf8Value());
  }
  return out;
}

// execve(file: string, argv: string[], env: string[]): never returns on success.
Napi::Value Execve(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsString()) throw Napi::TypeError::New(env, "execve: file must be a string");
  std::string file = info[0].As<Napi::String>().Utf8Value();
  std::vector<std::string> args = Strings(env, info[1], "argv"), envs = Strings(env, info[2], "env");
  std::vector<char*> argv, envp;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  for (auto& s : envs) envp.push_back(s.data());
  envp.push_back(nullptr);
  for (int fd = 0; fd <= 2; fd++) {
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0 && (fl & O_NONBLOCK)) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    int fdfl = fcntl(fd, F_GETFD);
    if (fdfl >= 0 && (fdfl & FD_CLOEXEC)) fcntl(fd, F_SETFD, fdfl & ~FD_CLOEXEC);
  }
  for (int sig = 1; sig < NSIG; sig++) {
    struct sigaction sa;
    if (sigaction(sig, nullptr, &sa) == 0 && sa.sa_handler == SIG_IGN) signal(sig, SIG_DFL);
  }
  sigset_t none;
  sigemptyset(&none);
  pthread_sigmask(SIG_SETMASK, &none, nullptr);
  execvpe(file.c_str(), argv.data(), envp.data());
  throw ErrnoError(env, file, errno, "execvpe");
}

}  // namespace

void InitExec(Napi::Env env, Napi::Object exports) {
  exports.Set("execve", Napi::Function::New(env, Execve, "execve"));
}

}  // namespace rg
