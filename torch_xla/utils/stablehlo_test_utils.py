"""torch_xla.utils.stablehlo_test_utils: helpers upstream's StableHLO export tests use.

The TensorFlow SavedModel round trip needs TensorFlow, which this torch_xla does not
depend on; those helpers raise NotImplementedError."""
import torch


def has_tf_package():
    """True when TensorFlow can be imported."""
    try:
        import tensorflow  # noqa: F401
        return True
    except ImportError:
        return False


def wrap_func_as_nn_module(f):
    """An nn.Module whose forward is f."""
    class Wrapped(torch.nn.Module):
        def forward(self, *args):
            return f(*args)
    return Wrapped().eval()


def load_save_model_and_inference(path, args):
    raise NotImplementedError("load_save_model_and_inference: TensorFlow SavedModel export is not "
                              "supported by this torch_xla")


def compare_exported_program_and_saved_model_result(ep, saved_model_path, args, atol=1e-3):
    raise NotImplementedError("compare_exported_program_and_saved_model_result: TensorFlow SavedModel "
                              "export is not supported by this torch_xla")
