// SPDX-License-Identifier: Apache-2.0
// Copyright 2025 The Hyperlight Authors.
use core::f64;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};

use hyperlight_common::flatbuffer_wrappers::guest_error::ErrorCode;
use hyperlight_common::func::Bytes;
use hyperlight_host::sandbox::SandboxConfiguration;
use hyperlight_host::{HyperlightError, Result, SandboxBuilder, new_error};
use hyperlight_testing::simple_guest_as_pathbuf;

pub mod common; // pub to disable dead_code warning
use crate::common::{
    with_all_guests, with_all_sandboxes, with_c_sandbox, with_c_sandbox_from,
    with_rust_uninit_sandbox, with_rust_uninit_sandbox_cfg,
};

#[test]
fn pass_byte_array() {
    with_all_sandboxes(|mut sandbox| {
        const LEN: usize = 10;
        let bytes = vec![1u8; LEN];
        let res: Vec<u8> = sandbox
            .call("SetByteArrayToZero", bytes.clone())
            .expect("Expected VecBytes");
        assert_eq!(res, [0; LEN]);

        sandbox
            .call::<i32>("SetByteArrayToZeroNoLength", bytes.clone())
            .unwrap_err(); // missing length param
    });
}

#[test]
fn fragmented_control_round_trip_releases_buffers() {
    // The control body exceeds the four inline segment slots.
    let input = "x".repeat(5 * SandboxConfiguration::DEFAULT_H2G_BUFFER_SIZE);

    with_all_guests(|path| {
        let mut sbox = SandboxBuilder::from_file(path)
            .heap_size(256 * 1024)
            .scratch_size(512 * 1024)
            .build()
            .unwrap();

        for _ in 0..3 {
            let output: String = sbox.call("Echo", input.clone()).unwrap();
            assert_eq!(output, input);
        }

        sbox.snapshot().unwrap();
    });
}

#[test]
fn float_roundtrip() {
    let doubles = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        std::f64::consts::PI,
        -std::f64::consts::PI,
        -1231.43821,
        f64::MAX,
        f64::MIN,
        f64::EPSILON,
        f64::INFINITY,
        -f64::INFINITY,
        f64::NAN,
        -f64::NAN,
    ];
    let floats = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        std::f32::consts::PI,
        -std::f32::consts::PI,
        -1231.4382,
        f32::MAX,
        f32::MIN,
        f32::EPSILON,
        f32::INFINITY,
        -f32::INFINITY,
        f32::NAN,
        -f32::NAN,
    ];
    with_all_sandboxes(|mut sandbox| {
        for f in doubles.iter() {
            let res: f64 = sandbox.call("EchoDouble", *f).unwrap();

            // Use == for comparison (handles -0.0 == 0.0) with special case for NaN.
            // Note: FlatBuffers doesn't preserve -0.0 (-0.0 round-trips to 0.0) because FlatBuffers skips
            // storing values equal to the default (as an optimization), and -0.0 == 0.0 in IEEE 754.
            assert!(
                (res.is_nan() && f.is_nan()) || res == *f,
                "Expected {:?} but got {:?}",
                f,
                res
            );
        }
        for f in floats.iter() {
            let res: f32 = sandbox.call("EchoFloat", *f).unwrap();

            // Use == for comparison (handles -0.0 == 0.0) with special case for NaN.
            // Note: FlatBuffers doesn't preserve -0.0 (-0.0 round-trips to 0.0) because FlatBuffers skips
            // storing values equal to the default (as an optimization), and -0.0 == 0.0 in IEEE 754.
            assert!(
                (res.is_nan() && f.is_nan()) || res == *f,
                "Expected {:?} but got {:?}",
                f,
                res
            );
        }
    });
}

#[test]
fn invalid_guest_function_name() {
    with_all_sandboxes(|mut sandbox| {
        let fn_name = "FunctionDoesntExist";
        let res = sandbox.call::<i32>(fn_name, ());
        assert!(
            matches!(res.unwrap_err(), HyperlightError::GuestError(hyperlight_common::flatbuffer_wrappers::guest_error::ErrorCode::GuestFunctionNotFound, error_name) if error_name == fn_name)
        );
    });
}

#[test]
fn set_static() {
    with_all_guests(|path| {
        let mut sandbox = SandboxBuilder::from_file(path)
            .scratch_size(0x100C000)
            .build()
            .unwrap();
        let fn_name = "SetStatic";
        let res = sandbox.call::<i32>(fn_name, ());
        assert!(res.is_ok());
        // the result is the size of the static array in the guest
        assert_eq!(res.unwrap(), 1024 * 1024);
    });
}

#[test]
fn multiple_parameters() {
    let (tx, rx) = channel();
    let writer = move |msg: String| {
        tx.send(msg).unwrap();
        0
    };

    let args = (
        ("1".to_string(), "arg1:1"),
        (2_i32, "arg2:2"),
        (3_i64, "arg3:3"),
        ("4".to_string(), "arg4:4"),
        ("5".to_string(), "arg5:5"),
        (true, "arg6:true"),
        (false, "arg7:false"),
        (8_u32, "arg8:8"),
        (9_u64, "arg9:9"),
        (10_i32, "arg10:10"),
        (3.123_f32, "arg11:3.123"),
    );

    macro_rules! test_case {
        ($sandbox:ident, $rx:ident, $name:literal, ($($p:ident),+)) => {{
            let ($($p),+, ..) = args.clone();
            let _res: i32 = $sandbox.call($name, ($($p.0,)+)).unwrap();
            let output = $rx.try_recv().unwrap();
            assert_eq!(output, format!("Message: {}.", [$($p.1),+].join(" ")));
        }};
    }

    with_all_guests(|path| {
        let mut sb = SandboxBuilder::from_file(path)
            .host_print(writer.clone())
            .build()
            .unwrap();
        test_case!(sb, rx, "PrintTwoArgs", (a, b));
        test_case!(sb, rx, "PrintThreeArgs", (a, b, c));
        test_case!(sb, rx, "PrintFourArgs", (a, b, c, d));
        test_case!(sb, rx, "PrintFiveArgs", (a, b, c, d, e));
        test_case!(sb, rx, "PrintSixArgs", (a, b, c, d, e, f));
        test_case!(sb, rx, "PrintSevenArgs", (a, b, c, d, e, f, g));
        test_case!(sb, rx, "PrintEightArgs", (a, b, c, d, e, f, g, h));
        test_case!(sb, rx, "PrintNineArgs", (a, b, c, d, e, f, g, h, i));
        test_case!(sb, rx, "PrintTenArgs", (a, b, c, d, e, f, g, h, i, j));
        test_case!(sb, rx, "PrintElevenArgs", (a, b, c, d, e, f, g, h, i, j, k));
    });
}

#[test]
fn incorrect_parameter_type() {
    with_all_sandboxes(|mut sandbox| {
        let res = sandbox.call::<i32>(
            "Echo", 2_i32, // should be string
        );

        assert!(matches!(
            res.unwrap_err(),
            HyperlightError::GuestError(
                hyperlight_common::flatbuffer_wrappers::guest_error::ErrorCode::GuestFunctionParameterTypeMismatch,
                msg
            ) if msg == "Expected parameter type String for parameter index 0 of function Echo but got Int."
        ));
    });
}

#[test]
fn incorrect_parameter_num() {
    with_all_sandboxes(|mut sandbox| {
        let res = sandbox.call::<i32>("Echo", ("1".to_string(), 2_i32));
        assert!(matches!(
            res.unwrap_err(),
            HyperlightError::GuestError(
                hyperlight_common::flatbuffer_wrappers::guest_error::ErrorCode::GuestFunctionIncorrecNoOfParameters,
                msg
            ) if msg == "Called function Echo with 2 parameters but it takes 1."
        ));
    });
}

#[test]
fn small_scratch_sandbox() {
    let a = SandboxBuilder::from_file(simple_guest_as_pathbuf())
        .scratch_size(0x1000)
        .build();

    assert!(matches!(
        a.unwrap_err(),
        HyperlightError::MemoryRequestTooSmall(..)
    ));
}

#[test]
fn custom_guest_dispatch_is_working() {
    with_all_sandboxes(|mut sandbox| {
        let res: i32 = sandbox
            .call::<i32>("ThisIsNotARealFunctionButTheNameIsImportant", ())
            .unwrap();
        assert_eq!(res, 99);
    });
}

#[test]
fn host_return_conversion_can_call_host() {
    // The guest's TryFrom implementation calls HostNoOp while converting an integer.
    let calls = Arc::new(AtomicUsize::new(0));
    let callback_calls = calls.clone();
    let mut sbox = SandboxBuilder::from_file(simple_guest_as_pathbuf())
        .host_function("HostEchoI32", |value: i32| value)
        .host_function("HostNoOp", move || {
            callback_calls.fetch_add(1, Ordering::Relaxed);
        })
        .build()
        .unwrap();

    let value: i32 = sbox.call("ConvertHostReturnWithHostCall", 42).unwrap();
    assert_eq!(value, 42);
    assert_eq!(calls.load(Ordering::Relaxed), 1);

    // Both calls release their transport state for the next guest entry.
    sbox.call::<()>("RoundTripHostNoOp", ()).unwrap();
    assert_eq!(calls.load(Ordering::Relaxed), 2);
}

#[test]
fn c_registered_null_returns_guest_error() {
    with_c_sandbox(|mut sbox| {
        // A registered callback has no implicit "function not found" fallback.
        let error = sbox.call::<()>("ReturnNull", ()).unwrap_err();
        assert!(matches!(
            error,
            HyperlightError::GuestError(ErrorCode::GuestError, message)
                if message == "C guest function \"ReturnNull\" returned null"
        ));

        // A callback error leaves the sandbox usable.
        let value: String = sbox.call("Echo", "ready".to_string()).unwrap();
        assert_eq!(value, "ready");
    });
}

#[test]
fn c_registered_error_overrides_null() {
    with_c_sandbox(|mut sbox| {
        // The explicit error takes precedence over the registered-null diagnostic.
        let error = sbox.call::<()>("ReturnNullWithError", ()).unwrap_err();
        assert!(matches!(
            error,
            HyperlightError::GuestError(ErrorCode::GuestError, message)
                if message == "C registered error"
        ));

        // The next dispatch must not inherit the consumed error.
        let value: String = sbox.call("Echo", "ready".to_string()).unwrap();
        assert_eq!(value, "ready");
    });
}

#[test]
fn c_fallback_error_overrides_null() {
    with_c_sandbox(|mut sbox| {
        // The fallback's explicit error takes precedence over function-not-found.
        let error = sbox.call::<()>("FallbackNullWithError", ()).unwrap_err();
        assert!(matches!(
            error,
            HyperlightError::GuestError(ErrorCode::GuestError, message)
                if message == "C fallback error"
        ));

        // The next dispatch must not inherit the consumed error.
        let value: String = sbox.call("Echo", "ready".to_string()).unwrap();
        assert_eq!(value, "ready");
    });
}

#[test]
fn c_registered_error_drops_returned_value() {
    with_c_sandbox_from(
        |builder| builder.heap_size(64 * 1024),
        |mut sbox| {
            // Eight ignored 16 KiB results exceed this heap if their payloads leak.
            for _ in 0..8 {
                let error = sbox
                    .call::<Vec<u8>>("ReturnValueWithError", ())
                    .unwrap_err();
                assert!(matches!(
                    error,
                    HyperlightError::GuestError(ErrorCode::GuestError, message)
                        if message == "C registered error"
                ));
            }

            // The final error must also leave the next dispatch usable.
            let value: String = sbox.call("Echo", "ready".to_string()).unwrap();
            assert_eq!(value, "ready");
        },
    );
}

#[test]
fn c_fallback_error_drops_returned_value() {
    with_c_sandbox_from(
        |builder| builder.heap_size(64 * 1024),
        |mut sbox| {
            // Eight ignored 16 KiB results exceed this heap if their payloads leak.
            for _ in 0..8 {
                let error = sbox
                    .call::<Vec<u8>>("FallbackValueWithError", ())
                    .unwrap_err();
                assert!(matches!(
                    error,
                    HyperlightError::GuestError(ErrorCode::GuestError, message)
                        if message == "C fallback error"
                ));
            }

            // The final error must also leave the next dispatch usable.
            let value: String = sbox.call("Echo", "ready".to_string()).unwrap();
            assert_eq!(value, "ready");
        },
    );
}

#[test]
fn c_guest_error_preserves_saved_host_return() {
    with_c_sandbox_from(
        |builder| builder.host_function("HostInt", || 42),
        |mut sbox| {
            // Leave a host result unread while reporting a separate dispatch error.
            let error = sbox.call::<()>("StashHostReturnAndError", ()).unwrap_err();
            assert!(matches!(
                error,
                HyperlightError::GuestError(ErrorCode::GuestError, message)
                    if message == "C dispatch error"
            ));

            // Starting another dispatch clears errors, not the saved host result.
            let value: i32 = sbox.call("ReadStashedHostReturn", ()).unwrap();
            assert_eq!(value, 42);
        },
    );
}

#[test]
fn c_saved_host_return_survives_restore() {
    with_c_sandbox_from(
        |builder| builder.host_function("HostInt", || 42),
        |mut sbox| {
            // Capture the unread host result in ordinary guest state.
            let error = sbox.call::<()>("StashHostReturnAndError", ()).unwrap_err();
            assert!(matches!(
                error,
                HyperlightError::GuestError(ErrorCode::GuestError, message)
                    if message == "C dispatch error"
            ));
            let snapshot = sbox.snapshot().unwrap();

            // The getter consumes the saved result.
            let value: i32 = sbox.call("ReadStashedHostReturn", ()).unwrap();
            assert_eq!(value, 42);

            // Restoring the snapshot makes that result available again.
            sbox.restore(snapshot).unwrap();
            let value: i32 = sbox.call("ReadStashedHostReturn", ()).unwrap();
            assert_eq!(value, 42);
        },
    );
}

fn simple_test_helper() {
    let messages = Arc::new(Mutex::new(Vec::new()));
    let messages_clone = messages.clone();
    let writer = move |msg: String| {
        let len = msg.len();
        let mut lock = messages_clone
            .try_lock()
            .map_err(|_| new_error!("Error locking"))
            .unwrap();
        lock.push(msg);
        len as i32
    };

    let message = "hello";
    let message2 = "world";

    with_all_guests(|path| {
        let mut sandbox = SandboxBuilder::from_file(path)
            .host_print(writer.clone())
            .build()
            .unwrap();
        let res: i32 = sandbox.call("PrintOutput", message.to_string()).unwrap();
        assert_eq!(res, 5);

        let res: String = sandbox.call("Echo", message2.to_string()).unwrap();
        assert_eq!(res, "world");

        let buffer = [1u8, 2, 3, 4, 5, 6];
        let res: Vec<u8> = sandbox
            .call("GetSizePrefixedBuffer", buffer.to_vec())
            .unwrap();
        assert_eq!(res, buffer);
    });

    let expected_calls = 2; // Once per guest (rust + c)

    assert_eq!(messages.try_lock().unwrap().len(), expected_calls);

    assert!(
        messages
            .try_lock()
            .unwrap()
            .iter()
            .all(|msg| msg == message)
    );
}

#[test]
fn simple_test() {
    simple_test_helper();
}

#[test]
fn simple_test_parallel() {
    let handles: Vec<_> = (0..50)
        .map(|_| {
            std::thread::spawn(|| {
                simple_test_helper();
            })
        })
        .collect();

    for handle in handles {
        handle.join().unwrap();
    }
}

fn callback_test_helper() {
    with_all_guests(|path| {
        // create host function
        let (tx, rx) = channel();
        let mut init_sandbox = SandboxBuilder::from_file(path)
            .host_function("HostMethod1", move |msg: String| {
                let len = msg.len();
                tx.send(msg).unwrap();
                Ok(len as i32)
            })
            .build()
            .unwrap();

        // call guest function that calls host function
        let msg = "Hello world";
        init_sandbox
            .call::<i32>("GuestMethod1", msg.to_string())
            .unwrap();

        let messages = rx.try_iter().collect::<Vec<_>>();
        assert_eq!(messages, [format!("Hello from GuestFunction1, {msg}")]);
    });
}

#[test]
fn callback_test() {
    callback_test_helper();
}

#[test]
fn host_external_bytes_round_trip() {
    with_rust_uninit_sandbox(|mut sandbox| {
        sandbox
            .register("HostEchoVecBytes", |value: Vec<u8>| value)
            .unwrap();

        sandbox
            .register("HostEchoByteChunks", |value: Vec<Bytes>| value)
            .unwrap();

        sandbox.register("HostNoOp", || {}).unwrap();
        let mut sandbox = sandbox.evolve().unwrap();
        let expected: Vec<u8> = (0..6 * 1024).map(|index| (index % 251) as u8).collect();

        let contiguous: Vec<u8> = sandbox
            .call("RoundTripHostVecBytes", expected.clone())
            .unwrap();

        assert_eq!(contiguous, expected);

        let input = vec![
            Bytes::copy_from_slice(&expected[..2047]),
            Bytes::copy_from_slice(&expected[2047..4097]),
            Bytes::copy_from_slice(&expected[4097..]),
        ];

        for _ in 0..2 {
            let chunks: Vec<Bytes> = sandbox
                .call("RoundTripHostByteChunks", input.clone())
                .unwrap();
            let flattened: Vec<u8> = chunks
                .iter()
                .flat_map(|chunk| chunk.iter().copied())
                .collect();
            assert_eq!(flattened, expected);
        }
    });
}

#[test]
fn guest_external_bytes_round_trip_and_retention() {
    with_rust_uninit_sandbox(|sandbox| {
        let mut sandbox = sandbox.evolve().unwrap();
        let expected: Vec<u8> = (0..9 * 1024).map(|index| (index % 251) as u8).collect();

        let contiguous: Vec<u8> = sandbox.call("EchoGuestVecBytes", expected.clone()).unwrap();
        assert_eq!(contiguous, expected);

        let input = vec![
            Bytes::copy_from_slice(&expected[..2047]),
            Bytes::copy_from_slice(&expected[2047..4097]),
            Bytes::copy_from_slice(&expected[4097..]),
        ];
        let chunks: Vec<Bytes> = sandbox.call("EchoGuestByteChunks", input.clone()).unwrap();
        assert_eq!(
            chunks
                .iter()
                .flat_map(|chunk| chunk.iter().copied())
                .collect::<Vec<_>>(),
            expected
        );

        let retained: Vec<u8> = (0..12_000).map(|index| (index % 251) as u8).collect();
        let retained_len: i32 = sandbox
            .call(
                "RetainGuestByteChunks",
                vec![Bytes::copy_from_slice(&retained)],
            )
            .unwrap();
        assert_eq!(retained_len as usize, retained.len());

        let released_len: i32 = sandbox.call("ReleaseGuestByteChunks", ()).unwrap();
        assert_eq!(released_len as usize, retained.len());

        let retried: Vec<u8> = sandbox.call("EchoGuestVecBytes", expected.clone()).unwrap();
        assert_eq!(retried, expected);
    });
}

#[test]
fn h2g_capacity_failure_does_not_poison_sandbox() {
    let mut cfg = SandboxConfiguration::default();
    cfg.set_h2g_pool_pages(4);

    with_rust_uninit_sandbox_cfg(cfg, |sandbox| {
        let mut sandbox = sandbox.evolve().unwrap();
        let retained = vec![0u8; 12_000];

        sandbox
            .call::<i32>(
                "RetainGuestByteChunks",
                vec![Bytes::copy_from_slice(&retained)],
            )
            .unwrap();

        let error = sandbox
            .call::<Vec<u8>>("EchoGuestVecBytes", vec![0u8; 9 * 1024])
            .unwrap_err();

        assert!(error.to_string().contains("H2G capacity"));

        let released: i32 = sandbox.call("ReleaseGuestByteChunks", ()).unwrap();
        assert_eq!(released as usize, retained.len());
    });
}

#[test]
fn retained_sub_page_h2g_slot_keeps_neighbors_available() {
    let mut cfg = SandboxConfiguration::default();
    cfg.set_h2g_buffer_size(256);
    cfg.set_h2g_pool_pages(1);

    with_rust_uninit_sandbox_cfg(cfg, |sandbox| {
        let mut sandbox = sandbox.evolve().unwrap();
        let expected = vec![0x5a; 16];

        // Every H2G slot shares the retained slot's page.
        let retained: i32 = sandbox
            .call(
                "RetainGuestByteChunks",
                vec![Bytes::copy_from_slice(&expected)],
            )
            .unwrap();
        assert_eq!(retained as usize, expected.len());

        let snapshot = sandbox.snapshot().unwrap();
        let echo: String = sandbox.call("Echo", "source".to_string()).unwrap();
        assert_eq!(echo, "source");

        let released: i32 = sandbox.call("ReleaseGuestByteChunks", ()).unwrap();
        assert_eq!(released, retained);

        for _ in 0..2 {
            sandbox.restore(snapshot.clone()).unwrap();

            // The host writes this request beside the retained slot before guest entry.
            let echo: String = sandbox.call("Echo", "restored".to_string()).unwrap();
            assert_eq!(echo, "restored");

            let actual: Vec<Bytes> = sandbox.call("ReadRetainedGuestByteChunks", ()).unwrap();
            assert_eq!(actual.concat(), expected);

            let released: i32 = sandbox.call("ReleaseGuestByteChunks", ()).unwrap();
            assert_eq!(released, retained);
        }
    });
}

fn assert_g2h_reply_capacity_failure_is_recoverable(queue_size: usize, pool_pages: usize) {
    let mut cfg = SandboxConfiguration::default();
    cfg.set_g2h_buffer_size(4096);
    cfg.set_g2h_queue_size(queue_size);
    cfg.set_g2h_pool_pages(pool_pages);

    with_rust_uninit_sandbox_cfg(cfg, |mut sandbox| {
        // Guest logs must not consume the capacity under test.
        sandbox.set_max_guest_log_level(tracing_core::LevelFilter::OFF);

        let calls = Arc::new(AtomicUsize::new(0));
        let host_calls = Arc::clone(&calls);
        sandbox
            .register("HostEchoVecBytes", move |value: Vec<u8>| {
                host_calls.fetch_add(1, Ordering::Relaxed);
                value
            })
            .unwrap();
        let mut sandbox = sandbox.evolve().unwrap();

        let error = sandbox
            .call::<Vec<u8>>("RoundTripHostVecBytes", vec![0; 4096])
            .unwrap_err();

        assert!(
            matches!(&error, HyperlightError::GuestError(_, message) if message.contains("G2H call retry")),
            "{error}"
        );
        assert_eq!(calls.load(Ordering::Relaxed), 0);

        let expected = vec![1u8; 32];
        let result: Vec<u8> = sandbox
            .call("RoundTripHostVecBytes", expected.clone())
            .unwrap();

        assert_eq!(result, expected);
        assert_eq!(calls.load(Ordering::Relaxed), 1);
    });
}

#[test]
fn g2h_reply_capacity_pool_exhaustion_is_recoverable() {
    assert_g2h_reply_capacity_failure_is_recoverable(4, 2);
}

#[test]
fn g2h_reply_capacity_descriptor_exhaustion_is_recoverable() {
    assert_g2h_reply_capacity_failure_is_recoverable(2, 4);
}

#[test]
fn g2h_reply_capacity_retained_buffers_are_recoverable() {
    let mut cfg = SandboxConfiguration::default();
    cfg.set_g2h_buffer_size(4096);
    cfg.set_g2h_pool_pages(2);

    with_rust_uninit_sandbox_cfg(cfg, |mut sandbox| {
        sandbox.set_max_guest_log_level(tracing_core::LevelFilter::OFF);

        sandbox
            .register("HostEchoByteChunks", |_: Vec<Bytes>| {
                vec![Bytes::from_static(b"retained")]
            })
            .unwrap();
        sandbox
            .register("HostEchoVecBytes", |value: Vec<u8>| value)
            .unwrap();
        sandbox.register("HostNoOp", || {}).unwrap();
        let mut sandbox = sandbox.evolve().unwrap();

        let retained: i32 = sandbox
            .call("RetainHostByteChunks", Vec::<Bytes>::new())
            .unwrap();
        assert_eq!(retained, 8);

        let error = sandbox
            .call::<Vec<u8>>("RoundTripHostVecBytes", Vec::<u8>::new())
            .unwrap_err();
        assert!(
            matches!(&error, HyperlightError::GuestError(_, message) if message.contains("G2H call retry")),
            "{error}"
        );

        sandbox.call::<()>("RoundTripHostNoOp", ()).unwrap();
        let released: i32 = sandbox.call("ReleaseHostByteChunks", ()).unwrap();
        assert_eq!(released, retained);

        let expected = vec![1u8; 32];
        let result: Vec<u8> = sandbox
            .call("RoundTripHostVecBytes", expected.clone())
            .unwrap();
        assert_eq!(result, expected);
    });
}

#[test]
fn retained_g2h_reply_on_every_page_keeps_neighbors_available() {
    let mut cfg = SandboxConfiguration::default();
    cfg.set_g2h_buffer_size(256);
    cfg.set_g2h_pool_pages(2);

    with_rust_uninit_sandbox_cfg(cfg, |mut sandbox| {
        sandbox.set_max_guest_log_level(tracing_core::LevelFilter::OFF);

        // The retained reply touches both pool pages.
        sandbox
            .register("HostEchoByteChunks", |_: Vec<Bytes>| {
                vec![Bytes::from(vec![0xa5; 6000])]
            })
            .unwrap();
        sandbox.register("HostNoOp", || {}).unwrap();
        let mut sandbox = sandbox.evolve().unwrap();

        let retained: i32 = sandbox
            .call("RetainHostByteChunks", Vec::<Bytes>::new())
            .unwrap();
        assert_eq!(retained, 6000);

        let snapshot = sandbox.snapshot().unwrap();

        for restore in [false, true] {
            if restore {
                sandbox.restore(snapshot.clone()).unwrap();
            }

            sandbox.call::<()>("RoundTripHostNoOp", ()).unwrap();
            let released: i32 = sandbox.call("ReleaseHostByteChunks", ()).unwrap();
            assert_eq!(released, retained);
        }
    });
}

#[test]
fn g2h_reply_capacity_uses_available_upper_buffers() {
    let mut cfg = SandboxConfiguration::default();
    cfg.set_g2h_buffer_size(4096);
    cfg.set_g2h_queue_size(4);
    cfg.set_g2h_pool_pages(4);

    with_rust_uninit_sandbox_cfg(cfg, |mut sandbox| {
        sandbox.set_max_guest_log_level(tracing_core::LevelFilter::OFF);

        // The request uses one descriptor. The response needs three upper-tier buffers.
        let expected = vec![1u8; 9 * 1024];
        let host_result = expected.clone();
        sandbox
            .register("HostEchoVecBytes", move |_: Vec<u8>| host_result.clone())
            .unwrap();
        let mut sandbox = sandbox.evolve().unwrap();

        let result: Vec<u8> = sandbox
            .call("RoundTripHostVecBytes", Vec::<u8>::new())
            .unwrap();
        assert_eq!(result, expected);
    });
}

#[test]
fn oversized_host_response_returns_transport_error() {
    with_rust_uninit_sandbox(|mut sandbox| {
        sandbox
            .register("HostOversizedVecBytes", || vec![0u8; 64 * 1024])
            .unwrap();

        sandbox.register("HostNoOp", || {}).unwrap();
        let mut sandbox = sandbox.evolve().unwrap();

        let error = sandbox
            .call::<Vec<u8>>("GetOversizedHostVecBytes", ())
            .unwrap_err();

        assert!(matches!(
            error,
            HyperlightError::GuestError(_, message)
                if message == "Host response exceeds virtqueue capacity"
        ));
        sandbox.call::<()>("RoundTripHostNoOp", ()).unwrap();
    });
}

#[test]
fn log_then_host_call_with_small_rings() {
    let mut cfg = SandboxConfiguration::default();
    cfg.set_g2h_queue_size(4);
    cfg.set_h2g_queue_size(4);
    cfg.set_g2h_pool_pages(2);

    with_rust_uninit_sandbox_cfg(cfg, |mut sandbox| {
        sandbox.set_max_guest_log_level(tracing_core::LevelFilter::INFO);
        sandbox.register("HostNoOp", || {}).unwrap();
        let mut sandbox = sandbox.evolve().unwrap();

        for _ in 0..20 {
            sandbox.call::<()>("LogThenHostNoOp", ()).unwrap();
        }
    });
}

#[test]
fn oversized_fixed_host_error_returns_transport_error() {
    with_rust_uninit_sandbox(|mut sandbox| {
        sandbox
            .register("HostNoOp", || -> Result<()> {
                Err(new_error!("host error {}", "x".repeat(1024)))
            })
            .unwrap();
        let mut sandbox = sandbox.evolve().unwrap();

        let error = sandbox.call::<()>("RoundTripHostNoOp", ()).unwrap_err();
        assert!(matches!(
            error,
            HyperlightError::GuestError(_, message)
                if message == "Host response exceeds virtqueue capacity"
        ));
    });
}

#[test]
fn callback_test_parallel() {
    #[cfg(all(target_arch = "aarch64", target_os = "windows"))]
    const THREADS: usize = 64;
    #[cfg(not(all(target_arch = "aarch64", target_os = "windows")))]
    const THREADS: usize = 100;

    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            std::thread::spawn(|| {
                callback_test_helper();
            })
        })
        .collect();

    for handle in handles {
        handle.join().unwrap();
    }
}

#[test]
fn host_function_error() {
    with_all_guests(|path| {
        // create host function
        let mut init_sandbox = SandboxBuilder::from_file(path)
            .host_function("HostMethod1", |_: String| -> Result<String> {
                Err(new_error!("Host function error!"))
            })
            .build()
            .unwrap();

        // call guest function that calls host function
        let msg = "Hello world";
        let snapshot = init_sandbox.snapshot().unwrap();

        for _ in 0..1000 {
            let res = init_sandbox
                .call::<i32>("GuestMethod1", msg.to_string())
                .unwrap_err();
            assert!(
                matches!(&res, HyperlightError::GuestError(_, msg) if msg == "Host function error!") // rust guest
                || matches!(&res, HyperlightError::GuestAborted(_, msg) if msg.contains("Host function error!")), // c guest
                "expected something but got {}",
                res
            );
            // C guest panics in rust guest lib when host function returns error, which will poison the sandbox
            if init_sandbox.status().is_poisoned() {
                init_sandbox.restore(snapshot.clone()).unwrap();
            }
        }
    });
}
