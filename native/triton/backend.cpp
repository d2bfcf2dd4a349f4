// libtriton_nmtserve.so: a Triton backend that runs nmtserve's Python models (``generate``) inside
// the tritonserver process, with no stub process between (issue 49: the request path).
//
// Why: the Python backend runs a model in a stub process and moves every request and response
// through shared memory, each response a round trip to the server process (~0.3 ms for an echo
// model here, ~0.6 ms for a served sentence). This backend embeds the interpreter of nmtserve's
// environment in the server process instead: a request's inputs are copied into numpy arrays
// and the model's answer is written into Triton's output buffers directly, from whichever thread
// answers (the engine's). The model code is the same as under the Python backend: the
// interpreter gets a stand-in for ``triton_python_backend_utils`` (nmtserve/server/inprocess.py)
// built on the functions below.
//
// The price is isolation: a crash in the model takes the server down (the launcher restarts it).
// The interpreter is the one the launcher names in NMTSERVE_PYTHON (its packages, its libpython).
#include <dlfcn.h>
#include <pybind11/embed.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "triton_c_api.h"

namespace py = pybind11;

namespace {

// Frees an error nobody reports (Triton's functions answer nullptr for success).
void drop(TRITONSERVER_Error* err) {
  if (err != nullptr) TRITONSERVER_ErrorDelete(err);
}

TRITONSERVER_Error* error(TRITONSERVER_Error_Code code, const std::string& message) {
  return TRITONSERVER_ErrorNew(code, ("nmtserve backend: " + message).c_str());
}

// Throws a Python RuntimeError carrying a Triton error's message (and frees the error).
void check(TRITONSERVER_Error* err, const char* what) {
  if (err == nullptr) return;
  std::string message = std::string(what) + ": " + TRITONSERVER_ErrorMessage(err);
  TRITONSERVER_ErrorDelete(err);
  throw std::runtime_error(message);
}

uint64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// numpy's dtype for a Triton type (BYTES: object, one bytes per element).
const char* numpy_type(TRITONSERVER_DataType type) {
  switch (type) {
    case TRITONSERVER_TYPE_BOOL: return "bool";
    case TRITONSERVER_TYPE_UINT8: return "uint8";
    case TRITONSERVER_TYPE_UINT16: return "uint16";
    case TRITONSERVER_TYPE_UINT32: return "uint32";
    case TRITONSERVER_TYPE_UINT64: return "uint64";
    case TRITONSERVER_TYPE_INT8: return "int8";
    case TRITONSERVER_TYPE_INT16: return "int16";
    case TRITONSERVER_TYPE_INT32: return "int32";
    case TRITONSERVER_TYPE_INT64: return "int64";
    case TRITONSERVER_TYPE_FP16: return "float16";
    case TRITONSERVER_TYPE_FP32: return "float32";
    case TRITONSERVER_TYPE_FP64: return "float64";
    case TRITONSERVER_TYPE_BYTES: return "object";
    default: return nullptr;
  }
}

TRITONSERVER_DataType triton_type(const py::dtype& dtype) {
  const char kind = dtype.kind();
  const auto size = dtype.itemsize();
  if (kind == 'O' || kind == 'S' || kind == 'U') return TRITONSERVER_TYPE_BYTES;
  if (kind == 'b') return TRITONSERVER_TYPE_BOOL;
  if (kind == 'f') return size == 2 ? TRITONSERVER_TYPE_FP16 : size == 4 ? TRITONSERVER_TYPE_FP32 : TRITONSERVER_TYPE_FP64;
  if (kind == 'i') {
    return size == 1 ? TRITONSERVER_TYPE_INT8 : size == 2 ? TRITONSERVER_TYPE_INT16
         : size == 4 ? TRITONSERVER_TYPE_INT32 : TRITONSERVER_TYPE_INT64;
  }
  if (kind == 'u') {
    return size == 1 ? TRITONSERVER_TYPE_UINT8 : size == 2 ? TRITONSERVER_TYPE_UINT16
         : size == 4 ? TRITONSERVER_TYPE_UINT32 : TRITONSERVER_TYPE_UINT64;
  }
  return TRITONSERVER_TYPE_INVALID;
}

// One input as read from the request before it is released: its bytes, gathered.
struct Input {
  std::string name;
  TRITONSERVER_DataType type;
  std::vector<int64_t> shape;
  std::string data;
};

// The array of an input (BYTES: the elements' 4-byte little-endian length, then their bytes).
py::object to_array(const Input& in) {
  const char* dtype = numpy_type(in.type);
  if (dtype == nullptr) throw std::runtime_error("input " + in.name + " has a type this backend does not read");
  std::vector<py::ssize_t> shape(in.shape.begin(), in.shape.end());
  py::ssize_t count = 1;
  for (auto d : shape) count *= d;
  if (in.type != TRITONSERVER_TYPE_BYTES) {
    py::array array{py::dtype(dtype), shape};
    if (static_cast<size_t>(array.nbytes()) != in.data.size()) {
      throw std::runtime_error("input " + in.name + " holds " + std::to_string(in.data.size()) + " bytes for its shape's " +
                               std::to_string(array.nbytes()));
    }
    std::memcpy(array.mutable_data(), in.data.data(), in.data.size());
    return std::move(array);
  }
  py::array array{py::dtype("object"), shape};
  auto* items = static_cast<PyObject**>(array.mutable_data());
  size_t at = 0;
  for (py::ssize_t i = 0; i < count; ++i) {
    uint32_t n = 0;
    if (at + 4 > in.data.size()) throw std::runtime_error("input " + in.name + " has fewer elements than its shape");
    std::memcpy(&n, in.data.data() + at, 4);
    at += 4;
    if (at + n > in.data.size()) throw std::runtime_error("input " + in.name + " has an element past its end");
    PyObject* item = PyBytes_FromStringAndSize(in.data.data() + at, n);
    if (item == nullptr) throw py::error_already_set();
    Py_XDECREF(items[i]);  // numpy filled the new array with None
    items[i] = item;
    at += n;
  }
  return std::move(array);
}

// A request's response factory: the one final response (outputs or an error) sent from any
// thread; a request Python dropped unanswered gets an INTERNAL error rather than no answer.
class Factory {
 public:
  explicit Factory(TRITONBACKEND_ResponseFactory* factory) : factory_(factory) {}
  Factory(const Factory&) = delete;
  Factory& operator=(const Factory&) = delete;
  ~Factory() {
    if (!sent_) send(nullptr, error(TRITONSERVER_ERROR_INTERNAL, "the model dropped the request without an answer"));
  }

  // outputs: (name, array) pairs.
  void send_outputs(const py::list& outputs) {
    if (sent_) throw std::runtime_error("the request was answered already");
    TRITONBACKEND_Response* response = nullptr;
    check(TRITONBACKEND_ResponseNewFromFactory(&response, factory_), "creating a response");
    try {
      for (const auto& item : outputs) {
        auto pair = item.cast<py::tuple>();
        write(response, pair[0].cast<std::string>(), pair[1]);
      }
    } catch (...) {
      drop(TRITONBACKEND_ResponseDelete(response));
      throw;
    }
    send(response, nullptr);
  }

  void send_error(int code, const std::string& message) {
    if (sent_) throw std::runtime_error("the request was answered already");
    send(nullptr, TRITONSERVER_ErrorNew(static_cast<TRITONSERVER_Error_Code>(code), message.c_str()));
  }

  bool is_cancelled() {
    if (factory_ == nullptr) return false;  // answered
    bool cancelled = false;
    check(TRITONBACKEND_ResponseFactoryIsCancelled(factory_, &cancelled), "asking whether the request was cancelled");
    return cancelled;
  }

 private:
  // Sends ``response`` (or a new one for ``err``) as the final one, without the GIL: Triton may
  // carry it on through an ensemble and the protocol on this thread. The factory goes at once:
  // it holds the model loaded, whatever Python still holds the request.
  void send(TRITONBACKEND_Response* response, TRITONSERVER_Error* err) {
    sent_ = true;
    std::unique_ptr<py::gil_scoped_release> released;
    if (PyGILState_Check()) released = std::make_unique<py::gil_scoped_release>();
    TRITONSERVER_Error* failed = nullptr;
    if (response == nullptr) failed = TRITONBACKEND_ResponseNewFromFactory(&response, factory_);
    if (failed == nullptr) failed = TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, err);
    if (err != nullptr) TRITONSERVER_ErrorDelete(err);
    if (failed != nullptr) {  // a client that went away: nothing to answer
      std::fprintf(stderr, "nmtserve backend: could not send a response: %s\n", TRITONSERVER_ErrorMessage(failed));
      TRITONSERVER_ErrorDelete(failed);
    }
    drop(TRITONBACKEND_ResponseFactoryDelete(factory_));
    factory_ = nullptr;
  }

  static void write(TRITONBACKEND_Response* response, const std::string& name, const py::handle& value) {
    py::array array = py::array::ensure(value, py::array::c_style);
    if (!array) throw std::runtime_error("output " + name + " is not an array");
    const TRITONSERVER_DataType type = triton_type(array.dtype());
    if (type == TRITONSERVER_TYPE_INVALID) throw std::runtime_error("output " + name + " has a type Triton has not");
    std::vector<int64_t> shape(array.shape(), array.shape() + array.ndim());
    std::string bytes;  // BYTES: each element's length, then the element
    const void* data = array.data();
    uint64_t size = static_cast<uint64_t>(array.nbytes());
    if (type == TRITONSERVER_TYPE_BYTES) {
      if (array.dtype().kind() != 'O') array = py::array::ensure(array.attr("astype")("object"), py::array::c_style);
      auto* items = static_cast<PyObject* const*>(array.data());
      for (py::ssize_t i = 0; i < array.size(); ++i) {
        char* text = nullptr;
        Py_ssize_t n = 0;
        py::object encoded;
        if (PyUnicode_Check(items[i])) {
          const char* utf8 = PyUnicode_AsUTF8AndSize(items[i], &n);
          if (utf8 == nullptr) throw py::error_already_set();
          text = const_cast<char*>(utf8);
        } else if (PyBytes_AsStringAndSize(items[i], &text, &n) != 0) {
          throw py::error_already_set();
        }
        const auto length = static_cast<uint32_t>(n);
        bytes.append(reinterpret_cast<const char*>(&length), 4);
        bytes.append(text, static_cast<size_t>(n));
      }
      data = bytes.data();
      size = bytes.size();
    }
    TRITONBACKEND_Output* output = nullptr;
    check(TRITONBACKEND_ResponseOutput(response, &output, name.c_str(), type, shape.data(),
                                      static_cast<uint32_t>(shape.size())), "adding an output");
    void* buffer = nullptr;
    TRITONSERVER_MemoryType memory = TRITONSERVER_MEMORY_CPU;
    int64_t memory_id = 0;
    check(TRITONBACKEND_OutputBuffer(output, &buffer, size, &memory, &memory_id), "allocating an output");
    if (size == 0) return;
    if (memory == TRITONSERVER_MEMORY_GPU) throw std::runtime_error("Triton gave output " + name + " GPU memory");
    std::memcpy(buffer, data, size);
  }

  TRITONBACKEND_ResponseFactory* factory_;
  bool sent_ = false;
};

// A Triton custom metric (``pb_utils.MetricFamily``'s): a family and its labelled metrics.
class MetricFamily {
 public:
  MetricFamily(const std::string& name, const std::string& description, int kind) {
    check(TRITONSERVER_MetricFamilyNew(&family_, static_cast<TRITONSERVER_MetricKind>(kind), name.c_str(),
                                       description.c_str()), "creating a metric family");
  }
  ~MetricFamily() {
    for (auto* metric : metrics_) drop(TRITONSERVER_MetricDelete(metric));
    drop(TRITONSERVER_MetricFamilyDelete(family_));
  }
  // A metric of the family with these labels; returns its index for set / increment.
  size_t metric(const std::map<std::string, std::string>& labels) {
    std::vector<TRITONSERVER_Parameter*> parameters;
    for (const auto& [key, value] : labels) {
      parameters.push_back(TRITONSERVER_ParameterNew(key.c_str(), TRITONSERVER_PARAMETER_STRING, value.c_str()));
    }
    TRITONSERVER_Metric* metric = nullptr;
    TRITONSERVER_Error* err = TRITONSERVER_MetricNew(&metric, family_, const_cast<const TRITONSERVER_Parameter**>(parameters.data()),
                                                     parameters.size());
    for (auto* p : parameters) TRITONSERVER_ParameterDelete(p);
    check(err, "creating a metric");
    metrics_.push_back(metric);
    return metrics_.size() - 1;
  }
  void set(size_t index, double value) { check(TRITONSERVER_MetricSet(metrics_.at(index), value), "setting a metric"); }
  void increment(size_t index, double value) {
    check(TRITONSERVER_MetricIncrement(metrics_.at(index), value), "incrementing a metric");
  }

 private:
  TRITONSERVER_MetricFamily* family_ = nullptr;
  std::vector<TRITONSERVER_Metric*> metrics_;
};

// A model instance: the Python model object (its ``execute`` takes the requests).
struct Instance {
  py::object model;
  TRITONBACKEND_ModelInstance* instance;
};

// Triton's JSON of a message (the model's config).
std::string json_of(TRITONSERVER_Message* message) {
  const char* base = nullptr;
  size_t size = 0;
  check(TRITONSERVER_MessageSerializeToJson(message, &base, &size), "reading the model configuration");
  return std::string(base, size);
}

// The Python exception being handled, as one line for Triton's error.
std::string python_error(const py::error_already_set& e) { return e.what(); }

}  // namespace

PYBIND11_EMBEDDED_MODULE(_nmtserve_triton, m) {
  m.doc() = "The nmtserve backend's side of the in-process Triton models (native/triton/backend.cpp).";
  py::class_<Factory>(m, "Factory")
      .def("send_outputs", &Factory::send_outputs, py::arg("outputs"))
      .def("send_error", &Factory::send_error, py::arg("code"), py::arg("message"))
      .def("is_cancelled", &Factory::is_cancelled);
  py::class_<MetricFamily>(m, "MetricFamily")
      .def(py::init<const std::string&, const std::string&, int>(), py::arg("name"), py::arg("description"),
           py::arg("kind"))
      .def("metric", &MetricFamily::metric, py::arg("labels"))
      .def("set", &MetricFamily::set)
      .def("increment", &MetricFamily::increment);
  m.attr("COUNTER") = static_cast<int>(TRITONSERVER_METRIC_KIND_COUNTER);
  m.attr("GAUGE") = static_cast<int>(TRITONSERVER_METRIC_KIND_GAUGE);
}

extern "C" {

__attribute__((visibility("default"))) TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend*) {
  uint32_t major = 0, minor = 0;
  if (TRITONSERVER_Error* err = TRITONBACKEND_ApiVersion(&major, &minor)) return err;
  if (major != TRITONBACKEND_API_VERSION_MAJOR || minor < TRITONBACKEND_API_VERSION_MINOR) {
    return error(TRITONSERVER_ERROR_UNSUPPORTED,
                 "Triton's backend API is " + std::to_string(major) + "." + std::to_string(minor) + ", this backend needs " +
                     std::to_string(TRITONBACKEND_API_VERSION_MAJOR) + "." +
                     std::to_string(TRITONBACKEND_API_VERSION_MINOR) + " or a later 1.x");
  }
  if (Py_IsInitialized()) return nullptr;
  // Triton opens a backend without making its symbols global; extension modules (numpy's) need
  // libpython's, so it is opened again with RTLD_GLOBAL.
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&Py_InitializeFromConfig), &info) == 0 || info.dli_fname == nullptr ||
      dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD) == nullptr) {
    return error(TRITONSERVER_ERROR_INTERNAL, "could not make libpython's symbols global");
  }
  PyConfig config;
  PyConfig_InitPythonConfig(&config);
  config.install_signal_handlers = 0;  // the server's signals stay the server's
  config.parse_argv = 0;
  const char* python = std::getenv("NMTSERVE_PYTHON");  // the launcher's interpreter: its environment's packages
  PyStatus status = PyStatus_Ok();
  if (python != nullptr && *python != '\0') status = PyConfig_SetBytesString(&config, &config.executable, python);
  if (!PyStatus_Exception(status)) status = Py_InitializeFromConfig(&config);
  PyConfig_Clear(&config);
  if (PyStatus_Exception(status)) {
    return error(TRITONSERVER_ERROR_INTERNAL,
                 std::string("could not start Python: ") + (status.err_msg ? status.err_msg : "unknown error"));
  }
  PyEval_SaveThread();  // the GIL is taken per call from here on
  return nullptr;
}

__attribute__((visibility("default"))) TRITONSERVER_Error* TRITONBACKEND_ModelInstanceInitialize(
    TRITONBACKEND_ModelInstance* instance) {
  TRITONBACKEND_Model* model = nullptr;
  const char *model_name = nullptr, *instance_name = nullptr, *location = nullptr;
  uint64_t version = 0;
  int32_t device = 0;
  TRITONBACKEND_ArtifactType artifact;
  TRITONSERVER_Message* config = nullptr;
  if (auto* err = TRITONBACKEND_ModelInstanceModel(instance, &model)) return err;
  if (auto* err = TRITONBACKEND_ModelName(model, &model_name)) return err;
  if (auto* err = TRITONBACKEND_ModelVersion(model, &version)) return err;
  if (auto* err = TRITONBACKEND_ModelRepository(model, &artifact, &location)) return err;
  if (auto* err = TRITONBACKEND_ModelInstanceName(instance, &instance_name)) return err;
  if (auto* err = TRITONBACKEND_ModelInstanceDeviceId(instance, &device)) return err;
  if (auto* err = TRITONBACKEND_ModelConfig(model, 1, &config)) return err;
  py::gil_scoped_acquire gil;
  try {
    std::string config_json = json_of(config);
    drop(TRITONSERVER_MessageDelete(config));
    py::dict args;  // what the Python backend hands ``initialize``
    args["model_config"] = config_json;
    args["model_name"] = model_name;
    args["model_instance_name"] = instance_name;
    args["model_instance_kind"] = "CPU";
    args["model_instance_device_id"] = std::to_string(device);
    args["model_repository"] = location;
    args["model_version"] = std::to_string(version);
    py::object loaded = py::module_::import("nmtserve.server.inprocess").attr("load")(args);
    TRITONBACKEND_ModelInstanceSetState(instance, new Instance{loaded, instance});
  } catch (const py::error_already_set& e) {
    return error(TRITONSERVER_ERROR_INTERNAL, "loading " + std::string(model_name) + " failed: " + python_error(e));
  } catch (const std::exception& e) {
    return error(TRITONSERVER_ERROR_INTERNAL, "loading " + std::string(model_name) + " failed: " + e.what());
  }
  return nullptr;
}

__attribute__((visibility("default"))) TRITONSERVER_Error* TRITONBACKEND_ModelInstanceFinalize(
    TRITONBACKEND_ModelInstance* instance) {
  void* state = nullptr;
  if (auto* err = TRITONBACKEND_ModelInstanceState(instance, &state)) return err;
  if (state == nullptr) return nullptr;
  py::gil_scoped_acquire gil;
  auto* self = static_cast<Instance*>(state);
  try {
    if (py::hasattr(self->model, "finalize")) self->model.attr("finalize")();
  } catch (const py::error_already_set& e) {
    std::fprintf(stderr, "nmtserve backend: finalize failed: %s\n", e.what());
  }
  delete self;
  return nullptr;
}

__attribute__((visibility("default"))) TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, const uint32_t count) {
  const uint64_t started = now_ns();
  void* state = nullptr;
  if (auto* err = TRITONBACKEND_ModelInstanceState(instance, &state)) return err;
  auto* self = static_cast<Instance*>(state);
  // Each request's inputs, requested outputs and parameters are copied out, its response factory
  // made and the request released before Python sees it: the answer comes from the factory.
  struct Read {
    std::vector<Input> inputs;
    std::vector<std::string> outputs;
    std::vector<std::tuple<std::string, TRITONSERVER_ParameterType, std::string, int64_t>> parameters;
    TRITONBACKEND_ResponseFactory* factory = nullptr;
    uint64_t timeout_us = 0;  // 0: none
    std::string problem;
  };
  std::vector<Read> read(count);
  for (uint32_t r = 0; r < count; ++r) {
    TRITONBACKEND_Request* request = requests[r];
    Read& out = read[r];
    TRITONSERVER_Error* err = TRITONBACKEND_ResponseFactoryNew(&out.factory, request);
    uint32_t n = 0;
    if (err == nullptr) err = TRITONBACKEND_RequestInputCount(request, &n);
    for (uint32_t i = 0; err == nullptr && i < n; ++i) {
      TRITONBACKEND_Input* input = nullptr;
      const char* name = nullptr;
      TRITONSERVER_DataType type;
      const int64_t* shape = nullptr;
      uint32_t dims = 0, buffers = 0;
      uint64_t size = 0;
      err = TRITONBACKEND_RequestInputByIndex(request, i, &input);
      if (err == nullptr) err = TRITONBACKEND_InputProperties(input, &name, &type, &shape, &dims, &size, &buffers);
      if (err != nullptr) break;
      Input in{name, type, std::vector<int64_t>(shape, shape + dims), {}};
      in.data.reserve(size);
      for (uint32_t b = 0; err == nullptr && b < buffers; ++b) {
        const void* buffer = nullptr;
        uint64_t length = 0;
        TRITONSERVER_MemoryType memory = TRITONSERVER_MEMORY_CPU;
        int64_t memory_id = 0;
        err = TRITONBACKEND_InputBuffer(input, b, &buffer, &length, &memory, &memory_id);
        if (err == nullptr && memory == TRITONSERVER_MEMORY_GPU) {
          err = error(TRITONSERVER_ERROR_UNSUPPORTED, std::string("input ") + name + " is in GPU memory");
        }
        if (err == nullptr) in.data.append(static_cast<const char*>(buffer), length);
      }
      out.inputs.push_back(std::move(in));
    }
    if (err == nullptr) err = TRITONBACKEND_RequestOutputCount(request, &n);
    for (uint32_t i = 0; err == nullptr && i < n; ++i) {
      const char* name = nullptr;
      err = TRITONBACKEND_RequestOutputName(request, i, &name);
      if (err == nullptr) out.outputs.emplace_back(name);
    }
    if (err == nullptr) err = TRITONBACKEND_InferenceRequestTimeoutMicroseconds(request, &out.timeout_us);
    if (err == nullptr) err = TRITONBACKEND_RequestParameterCount(request, &n);
    for (uint32_t i = 0; err == nullptr && i < n; ++i) {
      const char* key = nullptr;
      TRITONSERVER_ParameterType type;
      const void* value = nullptr;
      err = TRITONBACKEND_RequestParameter(request, i, &key, &type, &value);
      if (err != nullptr) break;
      if (type == TRITONSERVER_PARAMETER_STRING) {
        out.parameters.emplace_back(key, type, static_cast<const char*>(value), 0);
      } else if (type == TRITONSERVER_PARAMETER_INT) {
        out.parameters.emplace_back(key, type, "", *static_cast<const int64_t*>(value));
      } else if (type == TRITONSERVER_PARAMETER_BOOL) {
        out.parameters.emplace_back(key, type, "", *static_cast<const bool*>(value) ? 1 : 0);
      }  // DOUBLE and BYTES parameters: none of nmtserve's models reads one
    }
    if (err != nullptr) {
      out.problem = TRITONSERVER_ErrorMessage(err);
      TRITONSERVER_ErrorDelete(err);
    }
    const uint64_t done = now_ns();
    drop(TRITONBACKEND_ModelInstanceReportStatistics(instance, request, out.problem.empty(), started, started, done, done));
    drop(TRITONBACKEND_RequestRelease(request, TRITONSERVER_REQUEST_RELEASE_ALL));
  }
  py::gil_scoped_acquire gil;
  py::list batch;
  for (Read& one : read) {
    if (one.factory == nullptr) continue;  // no factory: the request could not be answered at all
    auto factory = std::make_unique<Factory>(one.factory);
    if (!one.problem.empty()) {
      factory->send_error(TRITONSERVER_ERROR_INTERNAL, "reading the request failed: " + one.problem);
      continue;
    }
    try {
      py::dict inputs, parameters;
      for (const Input& in : one.inputs) inputs[py::str(in.name)] = to_array(in);
      for (const auto& [key, type, text, number] : one.parameters) {
        if (type == TRITONSERVER_PARAMETER_STRING) parameters[py::str(key)] = text;
        else if (type == TRITONSERVER_PARAMETER_BOOL) parameters[py::str(key)] = number != 0;
        else parameters[py::str(key)] = number;
      }
      batch.append(py::make_tuple(inputs, one.outputs, parameters, py::cast(std::move(factory)), one.timeout_us));
    } catch (const std::exception& e) {
      if (factory) factory->send_error(TRITONSERVER_ERROR_INVALID_ARG, e.what());
    }
  }
  try {
    self->model.attr("execute_batch")(batch);
  } catch (const py::error_already_set& e) {
    // Requests execute did not take are answered by their factories' destructors (INTERNAL).
    std::fprintf(stderr, "nmtserve backend: execute failed: %s\n", e.what());
  }
  return nullptr;
}

}  // extern "C"
